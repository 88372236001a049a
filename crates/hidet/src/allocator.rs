//! mimalloc, the global allocator of the `hidet` tool and of the Python module: compiling a
//! model (once per new set of input shapes for a dynamic-axes model) allocates and frees many
//! small graph and IR objects, which mimalloc serves about 1.4x faster than glibc's malloc.
//! The library itself sets no global allocator; an embedding program chooses its own
//! ([`use_mimalloc!`](crate::use_mimalloc) makes the tool's choice).

pub use mimalloc::MiMalloc;

/// mimalloc's option numbers (`mi_option_e` of the mimalloc 3 the `mimalloc` crate builds),
/// which `libmimalloc-sys` does not name.
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets mimalloc's options for compiling models: memory freed is handed back to the system
/// at once (no purge delay) and arenas are committed as they are used, not when reserved, so
/// a compilation's peak resident memory is about glibc's malloc's (ResNet-50 356 MB vs 381,
/// Inception-V3 355 vs 349). The options apply to arenas created afterwards: call it before
/// the program's first allocation, from a function the loader runs
/// ([`configure_mimalloc_at_load`] in `.init_array`, as the tool and the Python module do);
/// called later, freed memory is still purged at once but the first arena stays committed.
/// Harmless when mimalloc is not the global allocator.
pub fn configure_mimalloc() {
    // SAFETY: `mi_option_set` only stores the value of a valid option number; both numbers
    // are options of mimalloc 3 (checked against their documented defaults in the tests).
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
    }
}

/// [`configure_mimalloc`] with the C calling convention, for a binary's or a shared
/// library's `.init_array`, which the loader runs before anything is allocated.
pub extern "C" fn configure_mimalloc_at_load() {
    configure_mimalloc();
}

/// Declares [`MiMalloc`] the global allocator of the program or shared library it is
/// expanded in (at most once, at the crate's root), configured by [`configure_mimalloc`] from
/// `.init_array` on Linux, before the first allocation: the `hidet` tool's and the Python
/// module's allocator.
#[macro_export]
macro_rules! use_mimalloc {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::allocator::MiMalloc = $crate::allocator::MiMalloc;

        #[cfg(target_os = "linux")]
        #[used]
        #[link_section = ".init_array"]
        static CONFIGURE_ALLOCATOR: extern "C" fn() = $crate::allocator::configure_mimalloc_at_load;
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_numbers_name_the_options_they_set() {
        // SAFETY: reading an option has no preconditions.
        let (delay, eager) = unsafe {
            (
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY),
                libmimalloc_sys::mi_option_get(MI_OPTION_ARENA_EAGER_COMMIT),
            )
        };
        // mimalloc 3's defaults (`src/options.c`): a 1000 ms purge delay, eager commit on
        // overcommitting systems only (2). The environment may override them.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(delay, 1000);
        }
        if std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_none() {
            assert_eq!(eager, 2);
        }
        configure_mimalloc();
        // SAFETY: as above.
        let after = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(after, 0);
    }
}
