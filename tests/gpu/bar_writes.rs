//! `GPU_ARENA_BAR_WRITES` on the test machine. Lavapipe is UMA: its arena is host-visible
//! already, so `on` changes nothing there (the plan tests in `memplan_tables.rs` show the type
//! choice on the full-BAR tables, and `device_report` measures both ways on a real GPU).

use crate::harness::{context_with, init_logging, test_config};
use gpu_arena::{ArenaConfig, BarWrites, Context};

#[gpu_test(needs = HostVisibleArena)]
fn bar_writes_on_is_a_no_op_on_lavapipe_whose_arena_is_host_visible_already() {
    let ctx = context_with(ArenaConfig {
        bar_writes: BarWrites::On,
        ..test_config()
    });
    let plan = ctx.memory_plan();
    assert!(plan.uma && plan.arena_host_visible);
    assert_eq!(plan.bar_write_candidates(), None);
    assert!(!ctx.bar_writes(), "nothing to switch on");
    let data: Vec<u32> = (0..1000).collect();
    let array = ctx.device_put(&data, &[1000]).unwrap();
    assert_eq!(ctx.device_get(&array).unwrap(), data);
    assert_eq!(
        ctx.staging_buffers_created(),
        (0, 0),
        "uploads are a memcpy anyway"
    );
}

#[gpu_test]
fn bar_writes_auto_is_off() {
    let ctx = context_with(test_config());
    assert_eq!(ctx.config().bar_writes, BarWrites::Auto);
    assert!(!ctx.bar_writes());
}

#[gpu_test]
fn bar_writes_on_with_zero_copy_off_is_refused_and_names_both_variables() {
    init_logging();
    let refused = Context::new(ArenaConfig {
        bar_writes: BarWrites::On,
        zero_copy: false,
        validation: true,
        ..test_config()
    });
    let message = refused.expect_err("a contradiction").to_string();
    // Set in code: named by the field, both variables in the text.
    assert!(
        message.starts_with("ArenaConfig::bar_writes=\"on\" is not valid"),
        "{message}"
    );
    assert!(message.contains("GPU_ARENA_ZERO_COPY=off"), "{message}");
    assert!(message.contains("GPU_ARENA_BAR_WRITES"), "{message}");
    // Read from the environment: named by the variable.
    let from_env = ArenaConfig::from_lookup(|name| match name {
        "GPU_ARENA_BAR_WRITES" => Some("on".to_string()),
        "GPU_ARENA_ZERO_COPY" => Some("0".to_string()),
        _ => None,
    });
    match from_env {
        Err(gpu_arena::Error::Config { variable, .. }) => {
            assert_eq!(variable, "GPU_ARENA_BAR_WRITES")
        }
        other => panic!("{other:?}"),
    }
}

#[gpu_test]
fn bar_writes_read_from_the_environment_reach_the_context() {
    let config = ArenaConfig::from_lookup(|name| {
        (name == "GPU_ARENA_BAR_WRITES").then(|| "off".to_string())
    })
    .unwrap();
    let ctx = context_with(ArenaConfig {
        mem_fraction: test_config().mem_fraction,
        ..config
    });
    assert_eq!(ctx.config().bar_writes, BarWrites::Off);
    assert!(!ctx.bar_writes());
}
