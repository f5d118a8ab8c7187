#!/usr/bin/env bash
# emulate-cluster.sh: builds (up) or removes (down) an emulated cluster on this machine from a cluster file.
#
#   scripts/emulate-cluster.sh up CLUSTER.json      one network namespace per host, one bridge per fabric, one
#                                                   veth pair per NIC shaped with tc tbf at the NIC's rate in
#                                                   both directions; writes the matching HETCOMM_TOPO_FILE
#   scripts/emulate-cluster.sh down CLUSTER.json    removes everything `up` made for that cluster
#   scripts/emulate-cluster.sh down --all           removes every emulated cluster (after a crash, say)
#   scripts/emulate-cluster.sh info CLUSTER.json    prints the state file (namespaces, addresses, topology file)
#
# A cluster file (clusters/*.json):
#   {"name": "mixed-4x2", "ranksPerHost": 2,
#    "hosts": [{"name": "h0", "ranks": 4, "nics": [{"name": "ib0", "kind": "ib", "rateMbps": 1600, "fabric": "ib-a"},
#              ...]}, ...]}
# A host's "ranks" is its own rank count (default ranksPerHost, itself 1 by default).
# kind is ib | roce | eth (what the topology file declares; the link itself is a veth), rateMbps the shaped rate,
# fabric the name of the bridge the NIC hangs on. Fabric number f gets the subnet 10.S.f.0/24 (S from the
# cluster's name, moved past any another cluster that is up holds), host number i the address .(i+1) there, and
# the bridge .254 (the rendezvous store listens on it, in the root namespace; the root namespace never routes
# between fabrics).
#
# `up` is idempotent: when the cluster is already up it says so; a half-built one is removed and rebuilt.
# State lives in /run/hetcomm-emulate/NAME.json, the topology file in /run/hetcomm-emulate/NAME.topo.json
# (hetcomm-run --cluster reads both). Needs root (network namespaces, tc).
# HETCOMM_EMU_BUCKET_MS (default 3): each shaped link's token bucket, in milliseconds at its rate (see shape()).
# HETCOMM_EMU_CC (default reno): the TCP congestion control of the hosts' namespaces (see congestion_control()).
# HETCOMM_EMU_PEAK (default 1): caps each shaper's peak rate at 1.01x its rate, so that a full bucket drains at
# the link's rate as a real NIC's queue does, not at once (see shape()); 0 lets a full bucket go at the veth's speed.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
[[ $# -ge 1 ]] || usage 2
case $1 in -h|--help) usage 0 ;; esac
if [[ $(id -u) -ne 0 ]]; then
  echo "emulate-cluster: needs root (it creates network namespaces, bridges and tc qdiscs); run it with sudo" >&2
  exit 1
fi
for t in ip tc python3; do
  command -v "$t" >/dev/null 2>&1 || { echo "emulate-cluster: '$t' not found (iproute2, python3)" >&2; exit 1; }
done

exec python3 - "$@" <<'PY'
import hashlib, json, os, subprocess, sys

STATE_DIR = "/run/hetcomm-emulate"
BUCKET_MS_TEXT = os.environ.get("HETCOMM_EMU_BUCKET_MS", "3")


def die(msg):
    sys.exit(f"emulate-cluster: {msg}")


if not BUCKET_MS_TEXT.isdigit() or not 1 <= int(BUCKET_MS_TEXT) <= 1000:
    die(f"HETCOMM_EMU_BUCKET_MS={BUCKET_MS_TEXT!r}: give the token bucket in whole milliseconds, 1 to 1000")
BUCKET_MS = int(BUCKET_MS_TEXT)
CC = os.environ.get("HETCOMM_EMU_CC", "reno")
PEAK_TEXT = os.environ.get("HETCOMM_EMU_PEAK", "1")
if PEAK_TEXT not in ("0", "1"):
    die(f"HETCOMM_EMU_PEAK={PEAK_TEXT!r}: give 1 (cap each link's peak rate at 1.01x its rate) or 0")
PEAK = PEAK_TEXT == "1"


def run(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        die(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r


def load_cluster(path):
    try:
        with open(path) as f:
            c = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    where = lambda p: f"{path}: {p}"
    if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
        die(where("$.name: a non-empty string is required"))
    hosts = c.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        die(where("$.hosts: a non-empty list is required"))
    names = set()
    for i, h in enumerate(hosts):
        if not isinstance(h, dict) or not isinstance(h.get("name"), str) or not h["name"]:
            die(where(f"$.hosts[{i}].name: a non-empty string is required"))
        if h["name"] in names:
            die(where(f"$.hosts[{i}].name: '{h['name']}' appears twice"))
        names.add(h["name"])
        if "ranks" in h and (not isinstance(h["ranks"], int) or isinstance(h["ranks"], bool) or h["ranks"] < 1):
            die(where(f"$.hosts[{i}].ranks: a positive integer is required"))
        if "gpus" in h and not isinstance(h["gpus"], list):
            die(where(f"$.hosts[{i}].gpus: a list is required"))
        nics = h.get("nics")
        if not isinstance(nics, list) or not nics:
            die(where(f"$.hosts[{i}].nics: a non-empty list is required"))
        seen = set()
        for j, n in enumerate(nics):
            p = f"$.hosts[{i}].nics[{j}]"
            if not isinstance(n, dict):
                die(where(f"{p}: an object is required"))
            nm = n.get("name")
            if not isinstance(nm, str) or not (1 <= len(nm) <= 15) or "/" in nm or " " in nm or nm == "lo":
                die(where(f"{p}.name: an interface name of 1-15 characters is required"))
            if nm in seen:
                die(where(f"{p}.name: '{nm}' appears twice on host {h['name']}"))
            seen.add(nm)
            if n.get("kind") not in ("ib", "roce", "eth"):
                die(where(f"{p}.kind: expected one of ib, roce, eth, got {json.dumps(n.get('kind'))}"))
            if not isinstance(n.get("rateMbps"), int) or not (1 <= n["rateMbps"] <= 400000):
                die(where(f"{p}.rateMbps: an integer in [1, 400000] is required"))
            if not isinstance(n.get("fabric"), str) or not n["fabric"]:
                die(where(f"{p}.fabric: a non-empty string is required"))
    rph = c.get("ranksPerHost", 1)
    if not isinstance(rph, int) or rph < 1:
        die(where("$.ranksPerHost: a positive integer is required"))
    return c


def subnets_in_use(except_name):
    """Second octets of the subnets other emulated clusters that are up hold."""
    used = set()
    if os.path.isdir(STATE_DIR):
        for f in os.listdir(STATE_DIR):
            if not f.endswith(".json") or f.endswith(".topo.json"):
                continue
            try:
                with open(os.path.join(STATE_DIR, f)) as fh:
                    p = json.load(fh)
            except (OSError, ValueError):
                continue
            if p.get("name") != except_name:
                used.update(int(fab["subnet"].split(".")[1]) for fab in p.get("fabrics", []))
    return used


def plan(c):
    """Names and addresses for every object. Names derive from the cluster name only (so down finds them again);
    the subnets from it too, moved on past any that another cluster that is up holds (two clusters up at once must
    not share addresses: the root namespace would route one's traffic into the other)."""
    cid = hashlib.sha1(c["name"].encode()).hexdigest()[:5]
    used = subnets_in_use(c["name"])
    second = 200 + int(cid, 16) % 50
    for step in range(50):
        if second not in used:
            break
        second = 200 + (second - 200 + 1) % 50
    else:
        die("all 50 subnets 10.200-249.x.x are held by emulated clusters that are up; take some down")
    fabrics = []
    for h in c["hosts"]:
        for n in h["nics"]:
            if n["fabric"] not in fabrics:
                fabrics.append(n["fabric"])
    if len(fabrics) > 250:
        die("more than 250 fabrics")
    kind_of = {}
    for h in c["hosts"]:
        for n in h["nics"]:
            if kind_of.setdefault(n["fabric"], n["kind"]) != n["kind"]:
                die(f"fabric {n['fabric']} has NICs of kinds {kind_of[n['fabric']]} and {n['kind']}")
    p = {"name": c["name"], "id": cid, "ranksPerHost": c.get("ranksPerHost", 1), "fabrics": [], "hosts": []}
    for f, name in enumerate(fabrics):
        p["fabrics"].append({"name": name, "kind": kind_of[name], "bridge": f"hcb{cid}f{f}",
                             "subnet": f"10.{second}.{f}.0/24", "storeAddr": f"10.{second}.{f}.254"})
    for i, h in enumerate(c["hosts"]):
        host = {"name": h["name"], "netns": f"hc-{cid}-{h['name']}", "ranks": h.get("ranks", p["ranksPerHost"]),
                "nics": []}
        for j, n in enumerate(h["nics"]):
            f = fabrics.index(n["fabric"])
            host["nics"].append({"name": n["name"], "kind": n["kind"], "rateMbps": n["rateMbps"],
                                 "fabric": n["fabric"], "bridge": p["fabrics"][f]["bridge"],
                                 "outer": f"hcv{cid}h{i}n{j}", "addr": f"10.{second}.{f}.{i + 1}",
                                 "storeAddr": p["fabrics"][f]["storeAddr"]})
        p["hosts"].append(host)
    return p


def netns_exists(ns):
    return os.path.exists(f"/run/netns/{ns}")


def shape(dev, mbps, ns=None):
    # The token bucket holds BUCKET_MS of the rate (at least 32 KiB). It must not be larger than it needs to be (a
    # link idle longer than that may then send that much at once, faster than its rate), nor smaller: tbf sends
    # from a timer, and on an idle vCPU that timer fires late; whatever the bucket cannot hold of the tokens due
    # meanwhile is lost, which a real NIC, sending from its own ring, never loses. Measured on the 2-vCPU Xeon,
    # one TCP stream of 16 MiB between two namespaces at 300 Mbit/s, the machine otherwise idle: a 1 ms bucket
    # carried 0.87-0.94 of what TCP can (0.956 of the rate), 2 ms 0.965-0.998, 3 ms 0.99-1.00, 5 ms 0.995-1.00;
    # with both cores busy, 1 ms carried 1.00 too. Segmentation offload is capped at 16 KiB per packet (tbf drops
    # packets larger than its bucket). The fabric's side (a switch port, fabric -> host) holds 50 ms and drops
    # beyond it, as a switch does. The host's side (host -> fabric) stands for the host's own queue in front of its
    # NIC: a NIC stops that queue when its ring is full rather than dropping, and Linux queues 10240 packets there
    # (fq_codel), so it holds 16 MB. With 50 ms there too, a host sending to several peers at once dropped its own
    # packets (173 in 12 calls of a 1 MiB allreduce on three-level-6) and waited out TCP's 200 ms retransmission
    # timer.
    # The bucket lets a link that was idle send up to BUCKET_MS of its rate at the veth's speed: on a fast link that
    # is more than a collective's chunk (1600 Mbit/s x 3 ms = 600 KB against 512 KiB), so a pipeline's first chunk
    # crosses an idle fast hop at once, which no NIC does. So the peak rate is capped at 1.01x the rate (a second
    # bucket of two packets; HETCOMM_EMU_PEAK=0 leaves it out): measured on island3-lone1, a 1 MiB chain broadcast
    # took 48.3 ms capped against 43.6-43.7 plain (the plain one's fill cost nothing, and the model, which charges
    # it, read 1.16 of it), while a 16 MiB stream over the InfiniBand took 87.6 ms either way (2026-11-29, AMD
    # EPYC VM).
    burst = max(32 * 1024, mbps * 1000 * 1000 // 8 * BUCKET_MS // 1000)
    peak = ["peakrate", f"{mbps * 1010}kbit", "mtu", "33000"] if PEAK else []
    queue = ["limit", str(16 << 20)] if ns else ["latency", "50ms"]
    pre = ["ip", "netns", "exec", ns] if ns else []
    run(*(pre + ["ip", "link", "set", "dev", dev, "gso_max_size", "16384"]))
    run(*(pre + ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbps}mbit", "burst", str(burst)]
          + peak + queue))


def check_congestion_control():
    allowed = open("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read().split()
    if CC not in allowed:
        die(f"HETCOMM_EMU_CC={CC!r}: a namespace may only choose one of {' '.join(allowed)} "
            "(net.ipv4.tcp_allowed_congestion_control)")


def congestion_control(ns):
    # Linux's default is cubic, which a namespace may not choose here unless the machine allows it (only the
    # algorithms in tcp_allowed_congestion_control are open to namespaces); at the emulated links' round trips
    # (tens of microseconds) cubic grows its window as reno does. The machine's default may be something else: on
    # the 2-vCPU Xeon it is bbr, whose model of the path breaks on these links (a minimum round trip of 10 us, the
    # host's queue in front of the NIC being the sender's own qdisc): on random-4 at 0.3 (three rails of 69, 198
    # and 342 Mbit/s) the flow on the slowest rail settled at a bandwidth estimate of 38 Mbit/s and a window of
    # 40 packets and carried 0.63-0.76 of its rate; a 64 MiB allgather over all three rails took 511-593 ms with
    # bbr and 474-475 ms with reno (the bound 441 ms), alternated in one run.
    run("ip", "netns", "exec", ns, "sh", "-c", f"echo {CC} > /proc/sys/net/ipv4/tcp_congestion_control")


def down_plan(p):
    for h in p["hosts"]:
        for n in h["nics"]:
            run("ip", "link", "del", n["outer"], check=False)
        if netns_exists(h["netns"]):
            run("ip", "netns", "del", h["netns"], check=False)
    for f in p["fabrics"]:
        run("ip", "link", "del", f["bridge"], check=False)


def topo_file(c, p):
    gpus = {h["name"]: h.get("gpus") for h in c["hosts"]}
    return {"version": 1,
            "description": f"emulated cluster {c['name']} (scripts/emulate-cluster.sh): "
                           + c.get("description", ""),
            "hosts": [{"hostId": h["name"],
                       "nics": [{"name": n["name"], "kind": n["kind"], "rateMbps": n["rateMbps"],
                                 "fabric": n["fabric"], "state": "up"} for n in h["nics"]],
                       # the cluster file's GPUs, as declared (device speeds and memory for the planner)
                       **({"gpus": gpus[h["name"]]} if gpus.get(h["name"]) else {})}
                      for h in p["hosts"]]}


def up(c, p, state_path, topo_path):
    if os.path.exists(state_path) and all(netns_exists(h["netns"]) for h in p["hosts"]) and all(
            os.path.exists(f"/sys/class/net/{f['bridge']}") for f in p["fabrics"]):
        print(f"emulate-cluster: {c['name']} is already up ({len(p['hosts'])} hosts); topology file {topo_path}")
        return
    check_congestion_control()  # before anything is built
    down_plan(p)  # whatever a half-built earlier attempt left
    for f in p["fabrics"]:
        run("ip", "link", "add", "name", f["bridge"], "type", "bridge", "forward_delay", "0", "stp_state", "0")
        run("ip", "addr", "add", f["storeAddr"] + "/24", "dev", f["bridge"])
        run("ip", "link", "set", f["bridge"], "up")
    for h in p["hosts"]:
        ns = h["netns"]
        run("ip", "netns", "add", ns)
        run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        congestion_control(ns)
        for n in h["nics"]:
            run("ip", "link", "add", n["outer"], "type", "veth", "peer", "name", n["name"], "netns", ns)
            run("ip", "link", "set", n["outer"], "master", n["bridge"])
            run("ip", "link", "set", n["outer"], "up")
            run("ip", "netns", "exec", ns, "ip", "addr", "add", n["addr"] + "/24", "dev", n["name"])
            run("ip", "netns", "exec", ns, "ip", "link", "set", n["name"], "up")
            shape(n["outer"], n["rateMbps"])          # fabric -> host
            shape(n["name"], n["rateMbps"], ns=ns)    # host -> fabric
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(topo_path, "w") as f:
        json.dump(topo_file(c, p), f, indent=2)
        f.write("\n")
    p["topoFile"] = topo_path
    with open(state_path, "w") as f:
        json.dump(p, f, indent=2)
        f.write("\n")
    print(f"emulate-cluster: {c['name']} is up: {len(p['hosts'])} hosts, {len(p['fabrics'])} fabrics; "
          f"topology file {topo_path}; TCP congestion control {CC}")
    for h in p["hosts"]:
        print(f"  {h['name']} (netns {h['netns']}, {h['ranks']} rank{'s' if h['ranks'] > 1 else ''}): " + ", ".join(
            f"{n['name']} {n['kind']} {n['rateMbps']} Mbit/s {n['addr']} on {n['fabric']}" for n in h["nics"]))


def main(argv):
    if len(argv) < 2:
        die("usage: emulate-cluster.sh up|down|info CLUSTER.json (or down --all)")
    verb, arg = argv[0], argv[1]
    if verb == "down" and arg == "--all":
        names = [f for f in os.listdir(STATE_DIR) if f.endswith(".json") and not f.endswith(".topo.json")] \
            if os.path.isdir(STATE_DIR) else []
        for f in names:
            with open(os.path.join(STATE_DIR, f)) as fh:
                p = json.load(fh)
            down_plan(p)
            for path in (os.path.join(STATE_DIR, f), p.get("topoFile", "")):
                if path and os.path.exists(path):
                    os.remove(path)
            print(f"emulate-cluster: {p['name']} is down")
        return
    c = load_cluster(arg)
    p = plan(c)
    state_path = os.path.join(STATE_DIR, c["name"] + ".json")
    topo_path = os.path.join(STATE_DIR, c["name"] + ".topo.json")
    if verb == "up":
        up(c, p, state_path, topo_path)
    elif verb == "down":
        down_plan(p)
        for path in (state_path, topo_path):
            if os.path.exists(path):
                os.remove(path)
        print(f"emulate-cluster: {c['name']} is down")
    elif verb == "info":
        if not os.path.exists(state_path):
            die(f"{c['name']} is not up (no {state_path})")
        print(open(state_path).read(), end="")
    else:
        die(f"unknown command '{verb}': up, down or info")


main(sys.argv[1:])
PY
