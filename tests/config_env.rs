//! The configuration read from the real process environment (no GPU needed: every value here
//! is refused before a device is asked for). One test in this binary, because it changes the
//! process's variables.

use gpu_arena::{ArenaConfig, Context, Error};
use std::ffi::OsString;

#[path = "host/config_variables.rs"]
mod config_variables;
use config_variables::EVERY_VARIABLE;

/// Sets `name` to `value` for the duration of `check`, then restores what was there.
fn with_var(name: &str, value: impl Into<OsString>, check: impl FnOnce()) {
    let before = std::env::var_os(name);
    std::env::set_var(name, value.into());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
    match before {
        Some(v) => std::env::set_var(name, v),
        None => std::env::remove_var(name),
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn assert_config_error(error: Error, variable: &str, needle: &str) {
    let msg = error.to_string();
    assert!(matches!(error, Error::Config { .. }), "{variable}: {msg}");
    assert!(msg.starts_with(variable), "{variable}: {msg}");
    assert!(msg.contains(needle), "{variable}: {msg}");
}

#[test]
fn bad_values_in_the_process_environment_are_errors_naming_the_variable() {
    // The variables the test runner sets (GPU_ARENA_VALIDATION=1 in CI) are valid.
    ArenaConfig::from_env().unwrap();

    // A value that is not UTF-8 is an error, never read as unset.
    #[cfg(unix)]
    for variable in EVERY_VARIABLE {
        use std::os::unix::ffi::OsStringExt;
        with_var(variable, OsString::from_vec(b"0.5\xff".to_vec()), || {
            let error = ArenaConfig::from_env().unwrap_err();
            assert_config_error(error, variable, "not UTF-8");
            let error = Context::from_env().expect_err("refused");
            assert_config_error(error, variable, "not UTF-8");
        });
    }
    // Blank values are not defaults in disguise.
    for variable in EVERY_VARIABLE {
        with_var(variable, "", || {
            let error = ArenaConfig::from_env().unwrap_err();
            assert_config_error(error, variable, "");
        });
    }
    // `*_MB` values whose bytes overflow are refused, never wrapped.
    for variable in [
        "GPU_ARENA_MAX_REGION_MB",
        "GPU_ARENA_DEVICE_MEMORY_MB",
        "GPU_ARENA_STAGING_MB",
        "GPU_ARENA_PINNED_HOST_MB",
    ] {
        for value in ["17592186044416", "18446744073709551615"] {
            with_var(variable, value, || {
                let error = ArenaConfig::from_env().unwrap_err();
                assert_config_error(error, variable, "(the largest accepted value)");
            });
        }
    }
    with_var("GPU_ARENA_MAX_REGION_MB", "17592186044416", || {
        let msg = ArenaConfig::from_env().unwrap_err().to_string();
        assert!(msg.contains("from 1 to 17592186044415"), "{msg}");
    });
    // A timeline capacity too large to allocate is refused before Context::new allocates it.
    with_var("GPU_ARENA_TIMELINE", "68719476736", || {
        let error = Context::from_env().expect_err("refused");
        assert_config_error(error, "GPU_ARENA_TIMELINE", "16777215");
    });
}
