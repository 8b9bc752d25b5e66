//! Secrets and credential errors, through the built binary (issue 44): no command that
//! takes a configuration prints a password from it, whatever is wrong with the file or the
//! environment; secrets read from a file or a variable, their source told by
//! `check-config`, never their value; a broker whose certificate is not trusted is named as
//! such with exit code 4, not as unreachable (3); verification turned off is warned about.
//! No Kafka needed: the TLS peer is `openssl s_server` on loopback.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const PASSWORD: &str = "GREPME";

fn loopguard(args: &[&str], env: &[(&str, &str)]) -> Output {
    // Under `timeout`: a command that loaded a configuration it should have refused would
    // otherwise run on.
    let mut c = Command::new("timeout");
    c.arg("60")
        .arg(env!("CARGO_BIN_EXE_loopguard"))
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("LOOPGUARD_CONFIG")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run loopguard")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every command that reads a configuration, given `config` as its file (with `--config`,
/// or as the file it checks).
fn every_command<'a>(config: &'a str, scratch: &'a Path) -> Vec<Vec<String>> {
    let events = scratch.join("e.jsonl");
    std::fs::write(&events, "").unwrap();
    let policy = scratch.join("p.toml");
    std::fs::write(&policy, "[tool]\nrepeat_threshold = 3\n").unwrap();
    let (events, policy) = (events.to_str().unwrap(), policy.to_str().unwrap());
    let c = ["--config", config];
    let lists: Vec<Vec<&str>> = vec![
        vec!["check-config", config],
        [&["serve"][..], &c].concat(),
        [&["replay"][..], &c, &[events]].concat(),
        [&["rules"][..], &c].concat(),
        [&["demo", "--duration", "1"][..], &c].concat(),
        [&["edge"][..], &c].concat(),
        [&["topics", "create", "--partitions", "1"][..], &c].concat(),
        [&["topics", "acls", "--guard", "User:g"][..], &c].concat(),
        [
            &["feedback", "--session", "s", "--verdict", "v", "--wrong"][..],
            &c,
        ]
        .concat(),
        [&["policy", "publish", policy][..], &c].concat(),
        [&["policy", "history"][..], &c].concat(),
        [&["policy", "show"][..], &c].concat(),
        vec!["policy", "check", config],
        vec!["policy", "diff", config, policy, "--events", events],
    ];
    lists
        .into_iter()
        .map(|l| l.into_iter().map(str::to_string).collect())
        .collect()
}

fn no_command_shows_the_password(config_text: &str, env: &[(&str, &str)], parse_error: bool) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loopguard.toml");
    std::fs::write(&file, config_text).unwrap();
    let file = file.to_str().unwrap();
    let closed = format!("127.0.0.1:{}", closed_port());
    let mut env = env.to_vec();
    // Nothing may reach a broker: the configuration is refused before.
    env.push(("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", closed.as_str()));
    for args in every_command(file, dir.path()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = loopguard(&args, &env);
        let all = text(&o);
        assert!(
            !all.contains(PASSWORD),
            "{args:?} shows the password:\n{all}"
        );
        assert!(
            !all.contains("42424242"),
            "{args:?} shows the token:\n{all}"
        );
        // `policy check` and `diff` read a configuration's [policy] only: refused when it
        // does not parse, fine when only another section is wrong.
        let policy_only = args[0] == "policy" && matches!(args[1], "check" | "diff");
        if parse_error || !policy_only {
            assert_eq!(o.status.code(), Some(2), "{args:?}: {all}");
        }
        if parse_error {
            assert!(all.contains(": line "), "{args:?}: {all}");
        }
    }
}

#[test]
fn a_syntax_error_on_the_password_line_shows_no_password() {
    no_command_shows_the_password(
        "[kafka.properties]\n\"sasl.username\" = \"beta-runtime\"\n\"sasl.password\" = \"hunter2-GREPME\n",
        &[],
        true,
    );
    no_command_shows_the_password(
        "[kafka.properties]\nsasl.password = hunter2-GREPME\n",
        &[],
        true,
    );
    no_command_shows_the_password(
        "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\" \"x\"\n",
        &[],
        true,
    );
}

#[test]
fn a_syntax_error_next_to_the_password_shows_no_password() {
    no_command_shows_the_password(
        "[kafka.properties]\n\"sasl.mechanism\" = \"PLAIN\" x\n\"sasl.password\" = \"hunter2-GREPME\"\n",
        &[],
        true,
    );
    no_command_shows_the_password(
        "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\n\"sasl.username\" = = \"u\"\n",
        &[],
        true,
    );
}

#[test]
fn a_wrong_typed_value_shows_no_password() {
    // The password repeated where a number belongs, and a token of the wrong type.
    no_command_shows_the_password(
        "[kafka]\nbatch_max_ms = \"hunter2-GREPME\"\n[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\n",
        &[],
        false,
    );
    no_command_shows_the_password(
        "[admin]\ndebug_token = 42424242\n[kafka]\nbatch_max_ms = \"x\"\n",
        &[],
        false,
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[admin]\ndebug_token = 42424242\n").unwrap();
    let o = loopguard(&["check-config", file.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o),
        "loopguard: invalid configuration:\n  - admin.debug_token: invalid type: integer `***`, expected a string\n"
    );
}

#[test]
fn an_env_error_shows_no_password() {
    no_command_shows_the_password(
        "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\n",
        &[
            ("LOOPGUARD__KAFKA__BATCH_MAX_EVENTS", "many"),
            (
                "LOOPGUARD__KAFKA__PROPERTIES__SSL_KEY_PASSWORD",
                "key-GREPME",
            ),
            // A secret pasted into the wrong variable: that variable's problem masks it.
            ("LOOPGUARD__KAFKA__THREADS", "key-GREPME"),
            ("LOOPGUARD__ADMIN__DEBUG_TOKEN__X", "token-GREPME"),
        ],
        false,
    );
}

#[test]
fn a_syntax_error_names_line_column_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "[kafka.properties]\n\"sasl.username\" = \"beta-runtime\"\n\"sasl.password\" = \"hunter2-GREPME\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let o = loopguard(&["check-config", f], &[]);
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("loopguard: cannot read configuration: {f}: line 3, column 34 (key kafka.properties.sasl.password): invalid basic string\n")
    );
}

#[test]
fn secrets_from_a_file_or_a_variable_are_used_and_their_source_told() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("kafka-password");
    std::fs::write(&secret, "hunter2-GREPME\n").unwrap();
    let secret = secret.to_str().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        format!(
            "[kafka.properties]\n\"sasl.username\" = \"beta-runtime\"\n\
             \"sasl.password\" = {{ file = \"{secret}\" }}\n\
             \"ssl.key.password\" = {{ env = \"LG_TEST_KEY_PASSWORD\" }}\n\
             [admin]\ndebug_token = \"token-GREPME\"\n"
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let env = [
        ("LG_TEST_KEY_PASSWORD", "key-GREPME"),
        (
            "LOOPGUARD__KAFKA__PROPERTIES__SASL_OAUTHBEARER_CLIENT_SECRET",
            "oauth-GREPME",
        ),
    ];
    let o = loopguard(&["check-config", f], &env);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!(
            "{f}: ok\n\
             secret kafka.properties.sasl.oauthbearer.client.secret: from env LOOPGUARD__KAFKA__PROPERTIES__SASL_OAUTHBEARER_CLIENT_SECRET (value not shown)\n\
             secret kafka.properties.sasl.password: from file {secret} (value not shown)\n\
             secret kafka.properties.ssl.key.password: from env LG_TEST_KEY_PASSWORD (value not shown)\n\
             secret admin.debug_token: from config file {f} (value not shown)\n"
        )
    );
    // The file's value is what the clients get: `rules` loads it like `serve`.
    let o = loopguard(&["rules", "--config", f], &env);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains(PASSWORD));
    // Missing: the setting and where it was looked for, never a value.
    std::fs::remove_file(secret).unwrap();
    let o = loopguard(&["check-config", f], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "loopguard: invalid configuration:\n  \
             - kafka.properties.sasl.password: cannot read the file {secret}: No such file or directory (os error 2)\n  \
             - kafka.properties.ssl.key.password: the environment variable LG_TEST_KEY_PASSWORD is not set\n"
        )
    );
}

#[test]
fn verification_turned_off_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "[kafka.properties]\n\"security.protocol\" = \"SSL\"\n\"ssl.endpoint.identification.algorithm\" = \"none\"\n\"enable.ssl.certificate.verification\" = \"false\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let o = loopguard(&["check-config", f], &[]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("warning: kafka.properties.ssl.endpoint.identification.algorithm = \"none\": the broker's host name is not checked")
            && out.contains("warning: kafka.properties.enable.ssl.certificate.verification = false: the broker's certificate is not verified at all"),
        "{out}"
    );
    let closed = format!("127.0.0.1:{}", closed_port());
    for args in [vec!["serve", "--config", f], vec!["edge", "--config", f]] {
        let o = loopguard(
            &args,
            &[
                ("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", closed.as_str()),
                ("LOOPGUARD_EDGE_LISTEN", "127.0.0.1:0"),
                ("RUST_LOG", "warn"),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let warned = err
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("ssl.endpoint.identification.algorithm"))
            .count();
        assert_eq!(warned, 1, "{args:?}: {err}");
    }
}

/// A TLS peer on loopback with a self-signed certificate nobody trusts.
struct UntrustedTls {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl UntrustedTls {
    fn start() -> UntrustedTls {
        let dir = tempfile::tempdir().unwrap();
        let (key, cert) = (dir.path().join("k.pem"), dir.path().join("c.pem"));
        let ok = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl (the TLS peer of this test)");
        assert!(ok.success());
        let port = closed_port();
        let child = Command::new("openssl")
            .args([
                "s_server",
                "-quiet",
                "-accept",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(10), "s_server not up");
            std::thread::sleep(Duration::from_millis(50));
        }
        UntrustedTls {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for UntrustedTls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_untrusted_certificate_is_named_with_exit_code_4_by_every_command_that_connects() {
    let tls = UntrustedTls::start();
    let addr = format!("127.0.0.1:{}", tls.port);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(&policy, "[tool]\nrepeat_threshold = 3\n").unwrap();
    let env = [
        ("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", addr.as_str()),
        ("LOOPGUARD__KAFKA__PROPERTIES__SECURITY_PROTOCOL", "SSL"),
        ("LOOPGUARD_EDGE_LISTEN", "127.0.0.1:0"),
        ("RUST_LOG", "off"),
    ];
    let property = "security.protocol=SSL".to_string();
    for args in [
        vec!["serve"],
        vec!["topics", "create", "--partitions", "1"],
        vec!["policy", "publish", policy.to_str().unwrap()],
        vec!["policy", "history"],
        vec!["feedback", "--session", "s", "--verdict", "v", "--wrong"],
        vec!["edge"],
        vec![
            "loadgen",
            "--bootstrap-servers",
            &addr,
            "--property",
            &property,
            "latency",
            "--duration",
            "1",
        ],
    ] {
        let t0 = Instant::now();
        let o = loopguard(&args, &env);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {err}");
        assert!(
            err.contains("TLS: the broker's certificate is not trusted (certificate verify failed")
                && err.contains("set ssl.ca.location"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("cannot reach"), "{args:?}: {err}");
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "{args:?}: {:?}",
            t0.elapsed()
        );
    }
}
