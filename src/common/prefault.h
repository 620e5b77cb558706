// Faulting in memory about to be written, in one system call instead of a page fault per 4 KiB
// page. On this project's VMs a fault costs ~10 us (2.75 s per GiB measured, against 1.5 s
// populated in one call and 0.06 s populated with huge pages), which made page faults a third
// of a restart's recovery of 10 M objects.
#pragma once

#include <cstddef>

namespace tierkv {

// Populates the whole pages inside [p, p + bytes) for writing (MADV_POPULATE_WRITE). With
// `huge_pages`, asks for transparent huge pages first: only for large short-lived buffers (the
// last partly used 2 MiB page is resident whole). Below 1 MiB it does nothing. Best effort and
// silent: where the kernel refuses (before Linux 5.14, or out of memory) the pages are faulted
// as they are written, as without it; nothing else changes.
void PrefaultForWrite(void* p, size_t bytes, bool huge_pages);

}  // namespace tierkv
