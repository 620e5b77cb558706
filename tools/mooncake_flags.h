// Mooncake's `mooncake_master` flags on `tierkv master`: a deployment's command line (gflags
// form, --name=value or --name value; a bare --name for a true bool) is translated into
// tierkv's own flags before CLI11 parses them, so the same launch script starts tierkv. A
// Mooncake flag naming a feature tierkv has maps onto the tierkv flag with the same meaning
// (units converted); one without an equivalent is refused with a message that says so (never
// ignored). docs/configuration.md, "Mooncake's master flags", lists them all.
#pragma once

#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::cli {

// `args`: the arguments after `master`. Returns them with every Mooncake flag replaced by its
// tierkv form (tierkv's own flags pass through unchanged), or INVALID_PARAMS naming the
// Mooncake flag and its tierkv equivalent, or saying that there is none.
Result<std::vector<std::string>> TranslateMooncakeMasterFlags(const std::vector<std::string>& args);

}  // namespace tierkv::cli
