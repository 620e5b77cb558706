// Per-rank NIC selection from the `device_name` config key.
//
// `device_name` is "" (no NIC pinned), one NIC ("mlx5_0": every rank uses it) or a
// comma-separated list ("mlx5_0,mlx5_1,..."): each rank then takes the entry at its physical
// GPU index, so that a GPU's transfers go through the NIC next to it. The physical GPU index is
// the local_rank-th entry of CUDA_VISIBLE_DEVICES when that variable is set, else the local rank
// itself. CUDA_VISIBLE_DEVICES entries must be integer indices: UUID entries ("GPU-...",
// "MIG-...") say nothing about the PCIe position, so they are refused with a clear error rather
// than mapped to a guess. docs/configuration.md, "Transport selection helpers", documents this.
// Thread-safety: pure functions; SelectDeviceFromEnv only reads the environment.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tierkv/status.h"

namespace tierkv::transport {

// The NIC this rank uses: "" when device_name is "", the single entry when there is one, else
// the entry at the physical GPU index (see above). `cuda_visible_devices` is the variable's
// value, nullopt when unset; "" hides every GPU. Errors: INVALID_CONFIG naming `device_name`,
// the list, the index and where the index came from (empty or blank entry, list too short,
// negative local rank, CUDA_VISIBLE_DEVICES too short or holding a non-integer/UUID entry).
Result<std::string> SelectDevice(std::string_view device_name,
                                 std::optional<std::string_view> cuda_visible_devices,
                                 int local_rank);

// This process's local rank and the environment variable it came from.
struct LocalRank {
  int rank = 0;
  std::string source;  // "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID" or "default"
};

// The local rank from the first non-empty one of LOCAL_RANK (torchrun),
// OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), SLURM_LOCALID (srun); 0 when none is set. Errors:
// INVALID_CONFIG naming the variable when its value is not an integer in 0..2^31-1 (a bad value
// is not skipped in favour of the next variable).
Result<LocalRank> LocalRankFromEnv();

// SelectDevice with CUDA_VISIBLE_DEVICES and LocalRankFromEnv() read from the environment;
// error messages also say which variable gave the local rank.
Result<std::string> SelectDeviceFromEnv(std::string_view device_name);

}  // namespace tierkv::transport
