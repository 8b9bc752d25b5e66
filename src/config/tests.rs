//! The configuration's loading and validation: files, environment, every problem named.
use super::*;
use std::io::Write;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn defaults_load() {
    let c = load_with_env(None, std::iter::empty()).unwrap();
    assert_eq!(c.kafka.events_topic, "agent-events");
    assert_eq!(c.kafka.delivery, Delivery::ExactlyOnce);
    assert_eq!(c.admin.listen.port(), 9464);
}

#[test]
fn file_then_env_override() {
    let f = file("[kafka]\ngroup_id = \"from-file\"\nbatch_max_events = 7\n[policy.budget]\nmax_tool_rounds = 20\n");
    let env = vec![
        (
            "LOOPGUARD__KAFKA__GROUP_ID".to_string(),
            "from-env".to_string(),
        ),
        (
            "LOOPGUARD__KAFKA__PROPERTIES__SASL_USERNAME".to_string(),
            "me".to_string(),
        ),
    ];
    let c = load_with_env(f.path().to_str(), env.into_iter()).unwrap();
    assert_eq!(c.kafka.group_id, "from-env");
    assert_eq!(c.kafka.batch_max_events.get(), 7);
    assert_eq!(c.kafka.batch_max_events.get(), 7);
    assert_eq!(c.policy.global().budget.max_tool_rounds, 20);
    assert!(c
        .kafka_properties()
        .contains(&("sasl.username".to_string(), "me".to_string())));
}

#[test]
fn stream_threads_default_to_the_cores_available() {
    let c = load_with_env(None, std::iter::empty()).unwrap();
    assert_eq!(c.kafka.threads, 0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(c.stream_threads(), cores);
    let env = [("LOOPGUARD__KAFKA__THREADS".to_string(), "3".to_string())];
    let c = load_with_env(None, env.into_iter()).unwrap();
    assert_eq!(c.stream_threads(), 3);
    let env = [("LOOPGUARD__KAFKA__THREADS".to_string(), "5000".to_string())];
    let err = load_with_env(None, env.into_iter())
        .unwrap_err()
        .to_string();
    assert!(err.contains("threads must be at most 256"), "{err}");
}

#[test]
fn env_values_take_the_type_of_the_setting_they_replace() {
    let env = [
        ("LOOPGUARD__KAFKA__GROUP_ID", "20240601"),
        ("LOOPGUARD__ADMIN__DEBUG_TOKEN", "123456"),
        ("LOOPGUARD__KAFKA__BATCH_MAX_EVENTS", "64"),
        ("LOOPGUARD__METRICS__TENANT_LABEL", "true"),
        (
            "LOOPGUARD__METRICS__TENANT_ALLOW_LIST",
            "team-red, team-blue",
        ),
        ("LOOPGUARD__KAFKA__PROPERTIES__SASL_PASSWORD", "0042"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let c = load_with_env(None, env.into_iter()).unwrap();
    assert_eq!(c.kafka.group_id, "20240601");
    assert_eq!(c.admin.debug_token, "123456");
    assert_eq!(c.kafka.batch_max_events.get(), 64);
    assert!(c.metrics.tenant_label);
    assert_eq!(c.metrics.tenant_allow_list, ["team-red", "team-blue"]);
    assert!(c
        .kafka_properties()
        .contains(&("sasl.password".to_string(), "0042".to_string())));
}

#[test]
fn a_bad_env_value_is_reported_with_its_setting() {
    let problems = |env: &[(&str, &str)]| {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        match load_with_env(None, env).unwrap_err() {
            ConfigError::Invalid(problems) => problems,
            e => panic!("{e}"),
        }
    };
    let p = problems(&[
        ("LOOPGUARD__KAFKA__BATCH_MAX_EVENTS", "many"),
        ("LOOPGUARD__METRICS__MODEL_LABEL", "yes"),
    ]);
    assert_eq!(
        p,
        [
            "LOOPGUARD__KAFKA__BATCH_MAX_EVENTS: `many` is not a number",
            "LOOPGUARD__METRICS__MODEL_LABEL: `yes` is not true or false"
        ]
    );
    let p = problems(&[("LOOPGUARD__KAFKA__NO_SUCH_KEY", "1")]);
    assert!(p.iter().any(|p| p.contains("no_such_key")), "{p:?}");
}

#[test]
fn every_problem_is_listed() {
    let f = file("[kafka]\nbatch_max_events = 0\n[admin]\nlisten = \"nowhere\"\n[bogus]\nx = 1\n[policy.tool]\nwindow = 0\n");
    let err = load_with_env(f.path().to_str(), std::iter::empty()).unwrap_err();
    let ConfigError::Invalid(problems) = err else {
        panic!("{err}")
    };
    assert!(problems.len() >= 4, "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("bogus")));
    assert!(problems.iter().any(|p| p.starts_with("admin.listen: ")));
    assert!(problems.iter().any(|p| p.contains("tool.window")));
}

#[test]
fn a_wrong_typed_value_names_its_key() {
    let f = file("[kafka]\nbatch_max_ms = \"fast\"\n[admin]\nlisten = 9464\n");
    let err = load_with_env(f.path().to_str(), std::iter::empty()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration:\n  \
         - kafka.batch_max_ms: invalid type: string \"fast\", expected u64\n  \
         - admin.listen: invalid type: integer `9464`, expected socket address"
    );
}

#[test]
fn a_wrong_typed_policy_value_names_its_key() {
    let f = file(
        "[policy.tool]\nwindow = \"x\"\n\
         [[policy.overrides]]\ntenant = \"a\"\n\
         [policy.overrides.set.budget]\nmax_tool_rounds = \"many\"\n",
    );
    let err = load_with_env(f.path().to_str(), std::iter::empty()).unwrap_err();
    let ConfigError::Invalid(problems) = err else {
        panic!("{err}")
    };
    assert_eq!(
        problems,
        [
            "policy.tool.window: invalid type: string \"x\", expected usize",
            "policy.overrides[0].set.budget.max_tool_rounds: invalid type: string \"many\", expected usize",
        ]
    );
    // A global mistake is not repeated under the overrides that inherit it.
    let f = file(
        "[policy.tool]\nwindow = \"x\"\n\
         [[policy.overrides]]\ntenant = \"a\"\n[policy.overrides.set.tool]\nrepeat_threshold = 4\n\
         [[policy.overrides]]\ntenant = 5\n",
    );
    let err = load_with_env(f.path().to_str(), std::iter::empty()).unwrap_err();
    let ConfigError::Invalid(problems) = err else {
        panic!("{err}")
    };
    assert_eq!(
        problems,
        [
            "policy.overrides[1].tenant: invalid type: integer `5`, expected a string",
            "policy.tool.window: invalid type: string \"x\", expected usize",
        ]
    );
}

#[test]
fn unknown_keys_are_errors() {
    let f = file("[engine]\nsession_tll_secs = 5\n");
    assert!(load_with_env(f.path().to_str(), std::iter::empty()).is_err());
}
