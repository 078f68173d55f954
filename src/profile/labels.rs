//! Scoped labels: name every array allocated while a guard lives, without threading a label
//! through every call (like `jax.named_scope` or PyTorch's `record_function`).

use std::cell::RefCell;
use std::marker::PhantomData;

/// What joins nested scope names: `label_scope("model")` around `label_scope("layer3")` labels
/// arrays `model/layer3`, as JAX's `named_scope` does.
pub const SCOPE_SEPARATOR: &str = "/";

thread_local! {
    /// The joined label of the scopes open on this thread ("" when none), and the length of
    /// the joined label before each scope was opened, so closing one truncates it.
    static SCOPES: RefCell<(String, Vec<usize>)> = const { RefCell::new((String::new(), Vec::new())) };
}

/// Keeps a label scope open; dropping it closes the scope. Made by [`label_scope`].
///
/// The guard is neither `Send` nor `Sync`: the scope belongs to the thread that opened it.
#[must_use = "the scope closes when the guard is dropped; bind it with `let _scope = ...`"]
pub struct LabelScope {
    _not_send: PhantomData<*const ()>,
}

/// Opens a label scope on this thread: every array allocated while the returned guard lives
/// and that has no explicit label gets `name` (joined with the names of enclosing scopes by
/// [`SCOPE_SEPARATOR`]) as its label in snapshots, reports and out-of-memory messages.
/// [`DeviceArray::with_label`](crate::DeviceArray::with_label) still overrides it.
///
/// ```no_run
/// # let ctx = gpu_arena::Context::new(Default::default())?;
/// let _model = gpu_arena::profile::label_scope("model");
/// {
///     let _layer = gpu_arena::profile::label_scope("layer3");
///     let w = ctx.zeros::<f32>(&[1024, 1024])?; // labelled "model/layer3"
/// #   drop(w);
/// }
/// # Ok::<(), gpu_arena::Error>(())
/// ```
pub fn label_scope(name: &str) -> LabelScope {
    SCOPES.with(|scopes| {
        let (joined, starts) = &mut *scopes.borrow_mut();
        starts.push(joined.len());
        if !joined.is_empty() {
            joined.push_str(SCOPE_SEPARATOR);
        }
        joined.push_str(name);
    });
    LabelScope {
        _not_send: PhantomData,
    }
}

/// The label of the scopes open on this thread, if any.
pub fn current_label_scope() -> Option<String> {
    SCOPES.with(|scopes| {
        let (joined, starts) = &*scopes.borrow();
        (!starts.is_empty()).then(|| joined.clone())
    })
}

impl Drop for LabelScope {
    fn drop(&mut self) {
        SCOPES.with(|scopes| {
            let (joined, starts) = &mut *scopes.borrow_mut();
            // Guards drop in reverse order of creation unless moved around; either way the
            // newest scope closes, which is what a caller dropping "a" guard can expect.
            if let Some(start) = starts.pop() {
                joined.truncate(start);
            }
        });
    }
}

/// Runs `f` with `explicit` if given, else with the scope label of this thread, if any.
/// Costs one thread-local read when no scope is open.
pub(crate) fn with_scoped_label<R>(explicit: Option<&str>, f: impl FnOnce(Option<&str>) -> R) -> R {
    if explicit.is_some() {
        return f(explicit);
    }
    SCOPES.with(|scopes| {
        let scopes = scopes.borrow();
        let (joined, starts) = &*scopes;
        f((!starts.is_empty()).then_some(joined.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_scopes_join_and_unwind() {
        assert_eq!(current_label_scope(), None);
        let outer = label_scope("model");
        {
            let _inner = label_scope("layer3");
            assert_eq!(current_label_scope().as_deref(), Some("model/layer3"));
            with_scoped_label(None, |l| assert_eq!(l, Some("model/layer3")));
            with_scoped_label(Some("kv"), |l| assert_eq!(l, Some("kv")));
        }
        assert_eq!(current_label_scope().as_deref(), Some("model"));
        drop(outer);
        assert_eq!(current_label_scope(), None);
        with_scoped_label(None, |l| assert_eq!(l, None));
    }
}
