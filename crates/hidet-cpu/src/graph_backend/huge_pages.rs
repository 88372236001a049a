//! Transparent huge pages for large, freshly allocated host buffers.
//!
//! A buffer of tens of megabytes (a language model's logits, a batch's activations) is a new
//! anonymous mapping each time it is allocated: the first write to every 4 KiB page faults
//! into the kernel. A 131 MB output is 32 000 faults per run, a fifth of the time of the
//! product that writes it. Asking for huge pages cuts that to one fault per 2 MiB. Linux
//! grants them to a range marked with `madvise(MADV_HUGEPAGE)` when transparent huge pages
//! are in `madvise` mode (the common default) or `always` (where the mark changes nothing);
//! elsewhere, and on other systems, the mark is not made and nothing changes.

/// Buffers at least this large are marked: a few huge pages' worth, so that the rounding to
/// whole huge pages wastes little.
pub const MIN_BYTES: usize = 8 << 20;

/// Marks the whole 4 KiB pages inside `[start, start + bytes)` for transparent huge pages,
/// when `bytes >= MIN_BYTES`. Must be called before the buffer is first written, or it
/// changes nothing for the pages already touched. Never fails: the mark is advice, and a
/// kernel that refuses it leaves the buffer as it was.
pub fn advise(start: *const u8, bytes: usize) {
    if bytes < MIN_BYTES {
        return;
    }
    advise_pages(start as usize, bytes);
}

#[cfg(target_os = "linux")]
fn advise_pages(start: usize, bytes: usize) {
    const PAGE: usize = 4096;
    let first = start.next_multiple_of(PAGE);
    let end = (start + bytes) & !(PAGE - 1);
    if end <= first {
        return;
    }
    // SAFETY: `[first, end)` lies inside one live allocation of the caller's, rounded inwards
    // to whole pages, so no other allocation's pages are marked; MADV_HUGEPAGE changes only
    // how future faults on those pages are served, never their contents or their mapping.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_pages(_start: usize, _bytes: usize) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Whether the kernel serves `madvise(MADV_HUGEPAGE)` ranges with huge pages.
    fn huge_pages_on_advice() -> bool {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|mode| mode.contains("[madvise]") || mode.contains("[always]"))
    }

    /// The `THPeligible` flag of the mapping of `/proc/self/smaps` that holds `address`.
    fn eligible(address: usize) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            // A mapping's header starts with its address range, `lo-hi` in hexadecimal.
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= address && address < hi;
                    continue;
                }
            }
            if let Some(flag) = line.strip_prefix("THPeligible:").filter(|_| inside) {
                return Some(flag.trim() == "1");
            }
        }
        None
    }

    #[test]
    fn large_buffers_are_marked_for_huge_pages() {
        if !huge_pages_on_advice() {
            return;
        }
        let mut large: Vec<u8> = Vec::with_capacity(MIN_BYTES * 2);
        advise(large.as_ptr(), large.capacity());
        let middle = large.as_ptr() as usize + MIN_BYTES;
        assert_eq!(
            eligible(middle),
            Some(true),
            "a {} byte buffer",
            MIN_BYTES * 2
        );
        large.resize(MIN_BYTES * 2, 7);
        assert!(
            large.iter().all(|&b| b == 7),
            "the advice changes no contents"
        );
    }
}
