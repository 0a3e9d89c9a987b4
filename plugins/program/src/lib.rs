//! The `program` harness: runs a real agent program inside the sandbox — mini-swe-agent as it
//! ships, or any command — and relays its model calls to the run's model.
//!
//! The program is started under `orchard-agent model-relay` (carried into every sandbox), which
//! points its OpenAI base URL (`OPENAI_BASE_URL`, `OPENAI_API_BASE`, `ORCHARD_MODEL_URL`) at a
//! loopback endpoint and queues each chat completion it asks for. This harness takes each call,
//! asks the run's model through the host (so the call is recorded with its token ids and
//! log-probabilities, as any harness's), and answers it. The program's own commands act on the
//! sandbox directly; graders look at the sandbox afterwards as for any harness.
//!
//! Config keys:
//! - `preset`: `mini-swe-agent` (2.4.6: `python -m minisweagent.run.mini` from the venv
//!   `{programs_dir}/mini-swe-agent`, or `venv`; its `config` specs as `--config`, `model_class`
//!   as `--model-class`), or
//! - `command`: a shell script (string) or an argv (list); `{task}`, `{task_file}` and `{model}`
//!   are filled in; the task is also in `ORCHARD_TASK` and the file `{task_file}`;
//!   `answer_file` is read as the answer after it exits.
//! - `env` (object), `cwd`, `model_name` (what the program is told, default `orchard`),
//!   `timeout` (seconds, default 3600: the program is killed after it), `max_model_calls`
//!   (default 250: the program is stopped, status `limit_reached`), `programs_dir`.
//!
//! The run ends when the program exits: `completed` for exit status 0 (or the program's own
//! success, for a preset that reports one), `gave_up` otherwise, with the end of its log.

wit_bindgen::generate!({ path: "../../wit/0.3.0", world: "harness" });

mod openai;
mod presets;

use exports::orchard::plugin::agent::Guest;
use orchard::plugin::log::{self, Level};
use orchard::plugin::types::{Error, Outcome, RunStatus, Task};
use orchard::plugin::{model, sandbox};
use serde_json::{Value, json};

use presets::{ResultFrom, WORK};

struct Program;

/// How long one ask of the relay waits for the program's next call.
const POLL_MS: u64 = 20_000;

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &[
    "preset",
    "command",
    "args",
    "config",
    "env",
    "cwd",
    "venv",
    "programs_dir",
    "model_class",
    "model_name",
    "max_context_size",
    "answer_file",
    "timeout",
    "max_model_calls",
];

impl Guest for Program {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config =
            orchard_harness_config::parse("program harness", &config, &[CONFIG_KEYS]).map_err(Error::InvalidInput)?;
        let bad = |e: String| Error::InvalidInput(format!("program harness: {e}"));
        let model_name = config.get("model_name").and_then(Value::as_str).unwrap_or("orchard").to_string();
        let launch = presets::launch(&config, &task.instruction, &model_name).map_err(bad)?;
        let timeout = config.get("timeout").and_then(Value::as_u64).unwrap_or(3600);
        let max_calls = config.get("max_model_calls").and_then(Value::as_u64).unwrap_or(250);
        let cwd = config.get("cwd").and_then(Value::as_str).map(str::to_string);

        sandbox::write_file(&presets::task_file(), task.instruction.as_bytes())?;
        let agent = agent_path()?;
        let port_file = format!("{WORK}/relay.port");
        let mut argv = vec![
            agent,
            "model-relay".into(),
            "--port-file".into(),
            port_file.clone(),
            "--model".into(),
            model_name,
            "--deadline-secs".into(),
            timeout.to_string(),
            "--".into(),
            "env".into(),
            format!("ORCHARD_TASK={}", task.instruction),
            format!("ORCHARD_TASK_FILE={}", presets::task_file()),
        ];
        argv.extend(launch.env.iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend(launch.argv.iter().cloned());
        log::event(Level::Info, "program-start", &json!({"argv": launch.argv, "cwd": cwd}).to_string());
        let id = sandbox::process_start(&sandbox::Command::Argv(argv), cwd.as_deref())?;
        let port = relay_port(&port_file, &id)?;

        let mut calls: u32 = 0;
        let limit_hit = loop {
            match next_call(port) {
                Ok(Some((call_id, request))) => {
                    if u64::from(calls) >= max_calls {
                        break true;
                    }
                    calls += 1;
                    let answer = match openai::request(&request) {
                        Ok(call) => match model::complete(&call.messages, &call.tools, &call.sampling) {
                            Ok(c) => json!({"status": 200, "body": openai::response(&c, calls)}),
                            Err(e) => {
                                // The host has retried what can be retried: the run ends here,
                                // as any harness's would.
                                stop(&id);
                                return Err(e);
                            }
                        },
                        Err(e) => {
                            log::event(Level::Warn, "program-bad-request", &e);
                            json!({"status": 400, "body": openai::error(&e)})
                        }
                    };
                    post_answer(port, &call_id, &answer)?;
                }
                Ok(None) => {
                    if !sandbox::process_status(&id)?.running {
                        break false;
                    }
                }
                Err(e) => {
                    // The relay stopped answering: it exits with the program (give the sandbox a
                    // moment to see it exit); one that still runs is broken.
                    if !wait_exit(&id, 20)?.running {
                        break false;
                    }
                    stop(&id);
                    return Err(e);
                }
            }
        };
        if limit_hit {
            stop(&id);
        }
        let mut state = wait_exit(&id, 100)?;
        if state.running {
            stop(&id);
            state = wait_exit(&id, 20)?;
        }
        let log_tail = tail_of_log(&state.log_path);
        let code = state.exit_code.unwrap_or(-1);
        log::event(Level::Info, "program-exit", &json!({"exit_code": code, "log_tail": log_tail}).to_string());
        if limit_hit {
            return Ok(Outcome {
                status: RunStatus::LimitReached,
                answer: None,
                steps: calls,
                message: Some(format!("the program was stopped after max_model_calls ({max_calls}) model calls")),
            });
        }
        let (status, answer) = read_result(&launch.result, code);
        let message = (status != RunStatus::Completed)
            .then(|| format!("the program exited with status {code}; the end of its log:\n{log_tail}"));
        Ok(Outcome { status, answer, steps: calls, message })
    }
}

/// Runs `command` in the sandbox's working directory, killed after `timeout_ms`.
fn exec(command: sandbox::Command, timeout_ms: u64) -> Result<sandbox::ExecResult, Error> {
    sandbox::exec(&sandbox::ExecRequest { command, cwd: None, env: vec![], timeout_ms: Some(timeout_ms), stdin: None })
}

/// The agent binary inside the sandbox (where each backend puts it).
fn agent_path() -> Result<String, Error> {
    let found = exec(sandbox::Command::Shell(
            "for a in /.orchard/agent /.orchard/bin/orchard-agent; do [ -x \"$a\" ] && { echo \"$a\"; exit 0; }; done; exit 1"
                .into(),
        ), 10_000)?;
    if found.exit_code != 0 {
        return Err(Error::Unavailable("program harness: the sandbox has no orchard-agent to relay with".into()));
    }
    Ok(found.stdout.trim().to_string())
}

/// Waits (up to 30 s) for the relay to say its port; a relay that exited first is named with
/// its log.
fn relay_port(port_file: &str, id: &str) -> Result<u16, Error> {
    let waited = exec(
        sandbox::Command::Shell(format!(
            "for i in $(seq 300); do [ -s {port_file} ] && {{ cat {port_file}; exit 0; }}; sleep 0.1; done; exit 1"
        )),
        40_000,
    )?;
    if let Ok(port) = waited.stdout.trim().parse() {
        return Ok(port);
    }
    let state = sandbox::process_status(id)?;
    Err(Error::Unavailable(format!(
        "program harness: the relay did not start (exit {:?}): {}",
        state.exit_code,
        tail_of_log(&state.log_path)
    )))
}

fn http(method: &str, port: u16, path: &str, body: Vec<u8>, timeout_ms: u64) -> Result<sandbox::HttpResponse, Error> {
    sandbox::http(&sandbox::HttpRequest {
        method: method.into(),
        port,
        path: path.into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body,
        timeout_ms: Some(timeout_ms),
    })
}

/// The program's next model call, or `None` when it made none while we waited.
fn next_call(port: u16) -> Result<Option<(String, Value)>, Error> {
    let r = http("GET", port, &format!("/_orchard/next?wait_ms={POLL_MS}"), vec![], POLL_MS + 10_000)?;
    match r.status {
        204 => Ok(None),
        200 => {
            let v: Value = serde_json::from_slice(&r.body)
                .map_err(|e| Error::Other(format!("program harness: the relay's answer is not JSON: {e}")))?;
            let id = v["id"].as_str().unwrap_or_default().to_string();
            Ok(Some((id, v["request"].clone())))
        }
        s => {
            Err(Error::Other(format!("program harness: the relay answered {s}: {}", String::from_utf8_lossy(&r.body))))
        }
    }
}

fn post_answer(port: u16, id: &str, answer: &Value) -> Result<(), Error> {
    let r = http("POST", port, &format!("/_orchard/answer/{id}"), answer.to_string().into_bytes(), 30_000)?;
    if r.status != 204 {
        // The program gave up on the call meanwhile (a client timeout); it will ask again.
        log::event(Level::Warn, "program-answer-dropped", &String::from_utf8_lossy(&r.body));
    }
    Ok(())
}

/// Stops the relay, the program and what it started (one process group).
fn stop(id: &str) {
    let _ = sandbox::process_signal(id, "KILL");
}

/// The relay's state once it has exited (it exits with the program), or after `tenths` tenths of
/// a second.
fn wait_exit(id: &str, tenths: u32) -> Result<sandbox::ProcessState, Error> {
    for _ in 0..tenths {
        let state = sandbox::process_status(id)?;
        if !state.running {
            return Ok(state);
        }
        let _ = exec(sandbox::Command::Argv(vec!["sleep".into(), "0.1".into()]), 5_000);
    }
    sandbox::process_status(id)
}

/// The last 4 KiB of the program's output.
fn tail_of_log(path: &str) -> String {
    exec(sandbox::Command::Argv(vec!["tail".into(), "-c".into(), "4096".into(), path.into()]), 10_000)
        .map(|r| r.stdout)
        .unwrap_or_default()
}

fn read_result(from: &ResultFrom, code: i32) -> (RunStatus, Option<String>) {
    let by_code = if code == 0 { RunStatus::Completed } else { RunStatus::GaveUp };
    match from {
        ResultFrom::File(None) => (by_code, None),
        ResultFrom::File(Some(path)) => {
            (by_code, sandbox::read_file(path).ok().map(|b| String::from_utf8_lossy(&b).into_owned()))
        }
        ResultFrom::MiniSweTrajectory(path) => {
            let Some(trajectory) = sandbox::read_file(path).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            else {
                return (RunStatus::GaveUp, None);
            };
            let info = &trajectory["info"];
            let status = presets::mini_swe_status(info["exit_status"].as_str().unwrap_or_default());
            let submission = info["submission"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
            (if code == 0 { status } else { RunStatus::GaveUp }, submission)
        }
    }
}

export!(Program);
