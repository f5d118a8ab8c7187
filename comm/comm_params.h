// comm_params.h: the HETCOMM_* parameters that more than one file of comm/ reads.
#pragma once

#include "common/param.h"

namespace hetcomm::comm {

HC_PARAM_STR(transportName, "TRANSPORT", "")
// 1: pairs whose hosts share several fabrics of the best kind stripe over them (tcp); 0: the best fabric only.
HC_PARAM_INT(multiRail, "MULTIRAIL", 1)

}  // namespace hetcomm::comm
