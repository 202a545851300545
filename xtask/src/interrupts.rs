//! Holding back Ctrl-C while a run writes its results. Until then an interrupt stops xtask and
//! its test binaries with nothing written; while the ledger, its run record and the pages
//! rendered from them are written, SIGINT only sets a flag, and once they are all written the
//! default action is restored and an interrupt that arrived is raised again (stopping xtask as
//! usual): the ledger is left as it was or wholly updated.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT held back for this value's life (process-wide, whichever thread receives it).
pub struct Deferred(());

impl Deferred {
    pub fn begin() -> Deferred {
        INTERRUPTED.store(false, Ordering::SeqCst);
        // SAFETY: installs a handler that only stores to an atomic.
        unsafe { libc::signal(libc::SIGINT, note_interrupt as *const () as libc::sighandler_t) };
        Deferred(())
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: restores the default action, then re-raises an interrupt that was held back.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            if INTERRUPTED.load(Ordering::SeqCst) {
                libc::raise(libc::SIGINT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_while_deferred_is_held_then_raised_again() {
        let deferred = Deferred::begin();
        // SAFETY: raising SIGINT at this process while the handler above is installed.
        unsafe { libc::raise(libc::SIGINT) };
        assert!(INTERRUPTED.load(Ordering::SeqCst), "the interrupt was held, the process still runs");
        // Not dropped here: that would stop the test process, as it stops xtask.
        std::mem::forget(deferred);
        unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    }
}
