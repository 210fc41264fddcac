// Which physical device each item of a device spec opens, so that no device is opened twice
// (private to the library; tests reach it directly).
#pragma once

#include <tilestream/devices.hpp>

#include <vector>

namespace tilestream {

/// The discovered GPU whose ordinal is `ordinal` (discovery may have left some out), or null.
const device_info* find_gpu(const std::vector<device_info>& gpus, int ordinal);

/// Throws invalid_argument when two items open the same GPU ("cuda:0,cuda:0", "all,cuda:0x2"): each would budget the whole free memory
/// and share one id. The message names the GPU and both items and suggests cuda:IxK. CPU items
/// are not duplicates: all CPU devices of a spec split the cores and memory between them.
void check_distinct_devices(const std::vector<device_request>& requests,
                            const std::vector<device_info>& gpus);

/// CPU devices the spec opens in all ("all" opens one).
int count_cpu_devices(const std::vector<device_request>& requests);

}  // namespace tilestream
