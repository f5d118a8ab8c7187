#include "collectives/synth/packing_lp.h"

#include <glpk.h>

#include <algorithm>
#include <mutex>

namespace hetcomm::coll::synth {
namespace {

// GLPK keeps its environment per thread only where it was built so. One program at a time in the process, the lock
// held for its whole life, is safe either way and lets each program free the environment when it is done (a thread
// that ends with it allocated leaks it); the programs are small (a packing is solved once per group and shape).
std::mutex& glpkLock() {
  static std::mutex mu;
  return mu;
}

// Simplex pivots per solve at most (a solve takes tens to a few hundred on the clusters measured).
constexpr int kIterationLimit = 20000;
constexpr int kTimeLimitMs = 500;
constexpr double kTieBreak = 1e-9;

}  // namespace

struct PackingLp::Impl {
  std::unique_lock<std::mutex> held{glpkLock()};  // first: taken before, and given back after, all the rest
  glp_prob* lp = nullptr;
  std::vector<double> rates, demand;
  std::vector<int> rootRow;  // per root: its row, 0 where it has no demand
  int firstPortRow = 0;      // port direction e is row firstPortRow + e
  int zColumn = 0;
  std::vector<int> columns;  // per tree: its GLPK column
  bool excluded = false;     // a column was excluded since the last solve
};

PackingLp::PackingLp(std::vector<double> rates, std::vector<double> demand) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.rates = std::move(rates);
  m.demand = std::move(demand);
  glp_term_out(GLP_OFF);
  m.lp = glp_create_prob();
  glp_set_obj_dir(m.lp, GLP_MIN);
  m.rootRow.assign(m.demand.size(), 0);
  for (size_t r = 0; r < m.demand.size(); ++r)
    if (m.demand[r] > 0) {
      m.rootRow[r] = glp_add_rows(m.lp, 1);
      glp_set_row_bnds(m.lp, m.rootRow[r], GLP_FX, 1, 1);  // the root's weights sum to 1
    }
  m.firstPortRow = glp_add_rows(m.lp, static_cast<int>(m.rates.size()));
  // load / rate - z <= 0, each row's bound lifted by its own tiny amount: trees of equal cost make the program
  // degenerate (many rows tight at once), and GLPK's simplex was seen to cycle on it; distinct bounds break the ties
  // and move the optimum by less than 1e-9 of a port's load.
  for (size_t e = 0; e < m.rates.size(); ++e)
    glp_set_row_bnds(m.lp, m.firstPortRow + static_cast<int>(e), GLP_UP, 0,
                     kTieBreak * static_cast<double>(e + 1) / static_cast<double>(m.rates.size()));
  m.zColumn = glp_add_cols(m.lp, 1);
  glp_set_col_bnds(m.lp, m.zColumn, GLP_LO, 0, 0);
  glp_set_obj_coef(m.lp, m.zColumn, 1);
  std::vector<int> ind(1);  // GLPK's arrays start at index 1
  std::vector<double> val(1);
  for (size_t e = 0; e < m.rates.size(); ++e) {
    ind.push_back(m.firstPortRow + static_cast<int>(e));
    val.push_back(-1);
  }
  glp_set_mat_col(m.lp, m.zColumn, static_cast<int>(m.rates.size()), ind.data(), val.data());
}

PackingLp::~PackingLp() {
  glp_delete_prob(impl_->lp);
  glp_free_env();
}

size_t PackingLp::addTree(int root, const std::vector<double>& load) {
  Impl& m = *impl_;
  std::vector<int> ind{0, m.rootRow[root]};
  std::vector<double> val{0, 1};
  for (size_t e = 0; e < m.rates.size(); ++e)
    if (load[e] > 0) {
      ind.push_back(m.firstPortRow + static_cast<int>(e));
      val.push_back(m.demand[root] * load[e] / m.rates[e]);
    }
  const int j = glp_add_cols(m.lp, 1);
  glp_set_col_bnds(m.lp, j, GLP_LO, 0, 0);
  glp_set_mat_col(m.lp, j, static_cast<int>(ind.size()) - 1, ind.data(), val.data());
  m.columns.push_back(j);
  return m.columns.size() - 1;
}

void PackingLp::exclude(size_t column) {
  glp_set_col_bnds(impl_->lp, impl_->columns[column], GLP_FX, 0, 0);
  impl_->excluded = true;
}

bool PackingLp::solve() {
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  // New trees keep the last basis primal feasible (the primal simplex goes on from it); excluded ones keep it dual
  // feasible (the dual simplex does). Either way a bounded number of pivots: these programs are degenerate (many
  // trees of equal cost), and an unbounded simplex was seen to cycle; past the limit the caller keeps what it had.
  parm.meth = impl_->excluded ? GLP_DUALP : GLP_PRIMAL;
  parm.it_lim = kIterationLimit;
  parm.tm_lim = kTimeLimitMs;
  impl_->excluded = false;
  int rc = glp_simplex(impl_->lp, &parm);
  if (rc == GLP_EBADB || rc == GLP_ESING || rc == GLP_ECOND) {
    // The last basis went singular: start again from an advanced one. (Past a limit, not again: that would double it.)
    glp_adv_basis(impl_->lp, 0);
    rc = glp_simplex(impl_->lp, &parm);
  }
  return rc == 0 && glp_get_status(impl_->lp) == GLP_OPT;
}

double PackingLp::congestion() const { return glp_get_col_prim(impl_->lp, impl_->zColumn); }

double PackingLp::weight(size_t column) const {
  return std::max(0.0, glp_get_col_prim(impl_->lp, impl_->columns[column]));
}

std::vector<double> PackingLp::portPrices() const {
  const Impl& m = *impl_;
  std::vector<double> price(m.rates.size());
  // A <= row of a minimisation has a dual <= 0: its negative is what a unit of (load / rate) there costs.
  for (size_t e = 0; e < m.rates.size(); ++e)
    price[e] = std::max(0.0, -glp_get_row_dual(m.lp, m.firstPortRow + static_cast<int>(e))) / m.rates[e];
  return price;
}

}  // namespace hetcomm::coll::synth
