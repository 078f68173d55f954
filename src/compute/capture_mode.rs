//! Capture modes, after CUDA's (`cudaStreamCaptureModeThreadLocal` / `Relaxed`): while a
//! [`Capture`](super::Capture) is open, a single op or launch called eagerly on the context
//! from the thread that opened it runs at once and is not part of the step, which is almost
//! always a mistake (`ctx.launch(..)` written for `cap.launch(..)`). By default such a call is
//! refused with [`Error::EagerDuringCapture`]; [`CaptureMode::Relaxed`] lets it through on
//! purpose. Other threads are never refused: their work is theirs.
//!
//! The open captures are kept in one small process-wide list (context, thread, number, mode),
//! read under a lock only while some capture is open: a single op with no capture open pays
//! one atomic load.

use crate::array::{Access, ArrayStorage};
use crate::context::Context;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;

/// What an open [`Capture`](super::Capture) does to eager work on its context from the thread
/// that opened it (set with [`Capture::set_mode`](super::Capture::set_mode)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaptureMode {
    /// Single ops and launches called on the context (not on the capture) from the thread
    /// that opened the capture are refused with [`Error::EagerDuringCapture`] while it is
    /// open (the default; CUDA's `cudaStreamCaptureModeThreadLocal`).
    #[default]
    ThreadLocal,
    /// They run at once, beside the capture and not part of it
    /// (`cudaStreamCaptureModeRelaxed`).
    Relaxed,
}

/// One open capture: the address of its context's shared state, the thread that opened it,
/// its number and its mode.
struct OpenEntry {
    context: usize,
    thread: ThreadId,
    number: u64,
    mode: CaptureMode,
}

/// Every open capture of the process. A leaf lock: nothing else is taken while it is held.
static OPEN: Mutex<Vec<OpenEntry>> = Mutex::new(Vec::new());
/// How many captures are open, so that single ops skip the lock when none is.
static OPEN_COUNT: AtomicUsize = AtomicUsize::new(0);

fn open_list() -> std::sync::MutexGuard<'static, Vec<OpenEntry>> {
    // Entries are whole at every unlock; a panic elsewhere leaves nothing half-written.
    OPEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Held by a capture while it is open: its entry in the list, removed when the capture
/// finishes or is dropped (on whatever thread that happens).
pub(crate) struct OpenCapture {
    number: u64,
}

impl OpenCapture {
    /// Registers capture `number` of `ctx`, opened on this thread, in the default mode.
    pub(crate) fn open(ctx: &Context, number: u64) -> Self {
        open_list().push(OpenEntry {
            context: address(ctx),
            thread: std::thread::current().id(),
            number,
            mode: CaptureMode::default(),
        });
        OPEN_COUNT.fetch_add(1, Ordering::Release);
        Self { number }
    }

    /// Sets this capture's mode.
    pub(crate) fn set_mode(&self, mode: CaptureMode) {
        if let Some(entry) = open_list().iter_mut().find(|e| e.number == self.number) {
            entry.mode = mode;
        }
    }
}

impl Drop for OpenCapture {
    fn drop(&mut self) {
        let mut list = open_list();
        if let Some(at) = list.iter().position(|e| e.number == self.number) {
            list.swap_remove(at);
            OPEN_COUNT.fetch_sub(1, Ordering::Release);
        }
    }
}

/// The address of `ctx`'s shared state: one per context, alive while a capture holds it.
fn address(ctx: &Context) -> usize {
    std::sync::Arc::as_ptr(&ctx.inner) as *const () as usize
}

impl Context {
    /// What every eager single op and launch checks first: [`Error::DeviceLost`] once the
    /// device is lost (before any argument is looked at), and [`Error::EagerDuringCapture`]
    /// when this thread holds a capture of this context open in [`CaptureMode::ThreadLocal`].
    pub(crate) fn check_eager_op(&self, operation: &'static str) -> Result<()> {
        self.inner.check_device(operation)?;
        if OPEN_COUNT.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let (context, thread) = (address(self), std::thread::current().id());
        let open = open_list();
        match open.iter().find(|e| {
            e.context == context && e.thread == thread && e.mode == CaptureMode::ThreadLocal
        }) {
            Some(entry) => Err(Error::EagerDuringCapture {
                operation,
                capture: entry.number,
            }),
            None => Ok(()),
        }
    }

    /// [`Context::check_eager_op`], then the op's array `storage` ready for `access` (named
    /// `argument` in a refusal).
    pub(crate) fn check_eager_array(
        &self,
        storage: &ArrayStorage,
        access: Access,
        operation: &'static str,
        argument: &str,
    ) -> Result<()> {
        self.check_eager_op(operation)?;
        storage.check_ready_for(&self.inner, access, operation, argument)
    }
}
