//! Scoped labels: name every array allocated while a guard lives, without threading a label
//! through every call (like `jax.named_scope` or PyTorch's `record_function`).

use std::cell::RefCell;
use std::marker::PhantomData;

/// What joins nested scope names: `label_scope("model")` around `label_scope("layer3")` labels
/// arrays `model/layer3`, as JAX's `named_scope` does.
pub const SCOPE_SEPARATOR: &str = "/";

/// The scopes open on one thread.
#[derive(Default)]
struct Scopes {
    /// Open scopes, oldest first: each guard's number and name.
    open: Vec<(u64, String)>,
    /// Their names joined by [`SCOPE_SEPARATOR`] ("" when none): read at every allocation, so
    /// kept ready rather than joined each time.
    joined: String,
    /// The number of the next scope.
    next_id: u64,
}

thread_local! {
    static SCOPES: RefCell<Scopes> = RefCell::new(Scopes::default());
}

/// Keeps a label scope open; dropping it closes the scope. Made by [`label_scope`].
///
/// Scopes may be closed in any order: dropping one removes exactly its own name, and the names
/// of the scopes still open stay in force, oldest outermost.
///
/// The guard is neither `Send` nor `Sync`: the scope belongs to the thread that opened it.
#[must_use = "the scope closes when the guard is dropped; bind it with `let _scope = ...`"]
pub struct LabelScope {
    id: u64,
    _not_send: PhantomData<*const ()>,
}

/// Opens a label scope on this thread: every array allocated while the returned guard lives
/// and that has no explicit label gets `name` (joined with the names of enclosing scopes by
/// [`SCOPE_SEPARATOR`]) as its label in snapshots, reports and out-of-memory messages.
/// [`DeviceArray::with_label`](crate::DeviceArray::with_label) still overrides it. An empty
/// `name` adds nothing (no empty segment, no separator): arrays under it alone have no label.
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
    let id = SCOPES.with(|scopes| {
        let scopes = &mut *scopes.borrow_mut();
        // A u64 count of scopes opened on one thread cannot wrap in practice; wrapping would
        // still number the scopes open at once apart.
        let id = scopes.next_id;
        scopes.next_id = id.wrapping_add(1);
        if !name.is_empty() {
            if !scopes.joined.is_empty() {
                scopes.joined.push_str(SCOPE_SEPARATOR);
            }
            scopes.joined.push_str(name);
        }
        scopes.open.push((id, name.to_string()));
        id
    });
    LabelScope {
        id,
        _not_send: PhantomData,
    }
}

/// The label of the scopes open on this thread, if any.
pub fn current_label_scope() -> Option<String> {
    SCOPES.with(|scopes| {
        let scopes = scopes.borrow();
        (!scopes.joined.is_empty()).then(|| scopes.joined.clone())
    })
}

impl Drop for LabelScope {
    fn drop(&mut self) {
        // `try_with`: a guard kept in another thread-local may drop after this thread's scopes
        // are gone, when there is nothing left to close.
        let _ = SCOPES.try_with(|scopes| {
            let scopes = &mut *scopes.borrow_mut();
            let Some(at) = scopes.open.iter().rposition(|(id, _)| *id == self.id) else {
                return;
            };
            let (_, name) = scopes.open.remove(at);
            // A nameless scope added nothing; closing the newest scope (the usual case) cuts
            // the joined label back; any other is rejoined from the scopes still open.
            if name.is_empty() {
            } else if at == scopes.open.len() {
                let separator = match scopes.joined.len() > name.len() {
                    true => SCOPE_SEPARATOR.len(),
                    false => 0,
                };
                let kept = scopes.joined.len() - name.len() - separator;
                scopes.joined.truncate(kept);
            } else {
                scopes.joined = scopes
                    .open
                    .iter()
                    .map(|(_, n)| n.as_str())
                    .filter(|n| !n.is_empty())
                    .collect::<Vec<_>>()
                    .join(SCOPE_SEPARATOR);
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
        f((!scopes.joined.is_empty()).then_some(scopes.joined.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nameless_scope_adds_no_segment_wherever_it_opens_or_closes() {
        assert_eq!(current_label_scope(), None);
        let empty = label_scope("");
        assert_eq!(current_label_scope(), None);
        let model = label_scope("model");
        let inner_empty = label_scope("");
        let layer = label_scope("layer");
        assert_eq!(current_label_scope().as_deref(), Some("model/layer"));
        drop(inner_empty);
        assert_eq!(current_label_scope().as_deref(), Some("model/layer"));
        drop(empty);
        drop(layer);
        assert_eq!(current_label_scope().as_deref(), Some("model"));
        let last_empty = label_scope("");
        drop(model);
        assert_eq!(current_label_scope(), None);
        drop(last_empty);
        assert_eq!(current_label_scope(), None);
    }

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

    #[test]
    fn closing_an_outer_scope_first_leaves_the_inner_one_in_force() {
        let outer = label_scope("model");
        let inner = label_scope("layer3");
        drop(outer);
        assert_eq!(current_label_scope().as_deref(), Some("layer3"));
        let newer = label_scope("attn");
        assert_eq!(current_label_scope().as_deref(), Some("layer3/attn"));
        drop(inner);
        assert_eq!(current_label_scope().as_deref(), Some("attn"));
        drop(newer);
        assert_eq!(current_label_scope(), None);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// The label in force is always the open scopes' names, oldest first, nameless
            /// ones left out, whatever order scopes are opened and closed in.
            #[test]
            fn scopes_closed_in_any_order_leave_exactly_the_open_ones_in_force(
                ops in proptest::collection::vec((any::<bool>(), any::<prop::sample::Index>(), "[a-z]{0,3}"), 0..40),
            ) {
                let mut open: Vec<(LabelScope, String)> = Vec::new();
                for (close, which, name) in ops {
                    if close && !open.is_empty() {
                        drop(open.remove(which.index(open.len())));
                    } else {
                        open.push((label_scope(&name), name));
                    }
                    let named: Vec<&str> =
                        open.iter().map(|(_, n)| n.as_str()).filter(|n| !n.is_empty()).collect();
                    let expected = (!named.is_empty()).then(|| named.join(SCOPE_SEPARATOR));
                    prop_assert_eq!(current_label_scope(), expected.clone());
                    with_scoped_label(None, |l| assert_eq!(l, expected.as_deref()));
                }
                drop(open);
                prop_assert_eq!(current_label_scope(), None);
            }
        }
    }
}
