//! The programs the harness knows by name, and the generic `command`.
//!
//! A preset says how to start the program non-interactively on one task with its model at the
//! relay, and how to read its answer and its own end status afterwards. Its package comes from
//! the operator's program cache, mounted read-only at `programs_dir` (default
//! `/opt/orchard/programs`): the sandbox never reaches a registry.

use serde_json::Value;

use crate::orchard::plugin::types::RunStatus;

/// Where the harness keeps its files in the sandbox.
pub const WORK: &str = "/tmp/.orchard-program";

/// How to start a program and read its result.
pub struct Launch {
    /// The program's argv (placeholders already filled in).
    pub argv: Vec<String>,
    /// Environment variables for it.
    pub env: Vec<(String, String)>,
    /// How its answer and status are read after it exits.
    pub result: ResultFrom,
}

/// Where a program's answer comes from.
pub enum ResultFrom {
    /// mini-swe-agent's trajectory file: `info.submission` and `info.exit_status`.
    MiniSweTrajectory(String),
    /// A file whose text is the answer (`answer_file`), or nothing.
    File(Option<String>),
}

/// The release of each preset the harness was written against and tested with.
pub const RELEASES: [(&str, &str); 3] =
    [("mini-swe-agent", "2.4.6"), ("kimi-cli", "1.52.0"), ("openhands", "openhands-sdk 1.58.2")];

/// Runs OpenHands' SDK default agent on `ORCHARD_TASK` in the working directory, its LLM at the
/// relay; the message of its `finish` call is written to the file named by the first argument.
const OPENHANDS_DRIVER: &str = r#"
import os, sys
from openhands.sdk import LLM, Conversation
from openhands.tools.preset.default import get_default_agent
llm = LLM(model="openai/" + os.environ["ORCHARD_MODEL_NAME"], base_url=os.environ["ORCHARD_MODEL_URL"],
          api_key=os.environ["OPENAI_API_KEY"], usage_id="agent")
conversation = Conversation(agent=get_default_agent(llm=llm, cli_mode=True), workspace=os.getcwd())
conversation.send_message(os.environ["ORCHARD_TASK"])
conversation.run()
for event in conversation.state.events:
    action = getattr(event, "action", None)
    if type(action).__name__ == "FinishAction":
        open(sys.argv[1], "w").write(action.message)
"#;

/// Runs Kimi-CLI's command line in print mode on `ORCHARD_TASK`, its one model a provider of
/// type `openai_legacy` at the relay; extra arguments follow (`args`).
const KIMI_DRIVER: &str = r#"
import json, os, sys
from kimi_cli.cli import cli
config = {
    "default_model": "orchard",
    "models": {"orchard": {"provider": "relay", "model": os.environ["ORCHARD_MODEL_NAME"],
                           "max_context_size": int(os.environ["KIMI_CONTEXT_SIZE"])}},
    "providers": {"relay": {"type": "openai_legacy", "base_url": os.environ["ORCHARD_MODEL_URL"],
                            "api_key": os.environ["OPENAI_API_KEY"]}},
}
args = ["--print", "--yolo", "--final-message-only", "--config", json.dumps(config),
        "--work-dir", os.getcwd(), "--prompt", os.environ["ORCHARD_TASK"]] + sys.argv[1:]
sys.exit(cli(args=args, prog_name="kimi"))
"#;

/// Builds the launch from the config. `Err` names the key that is wrong.
pub fn launch(config: &Value, task: &str, model: &str) -> Result<Launch, String> {
    let programs = config.get("programs_dir").and_then(Value::as_str).unwrap_or("/opt/orchard/programs");
    let mut env: Vec<(String, String)> = match config.get("env") {
        None => vec![],
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(format!("env.{k}: not a string")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("env: not an object of strings".into()),
    };
    let fill = |s: &str| s.replace("{task}", task).replace("{model}", model).replace("{task_file}", &task_file());
    match (config.get("preset").and_then(Value::as_str), config.get("command")) {
        (Some(_), Some(_)) => Err("give `preset` or `command`, not both".into()),
        (Some("mini-swe-agent"), None) => {
            let trajectory = format!("{WORK}/mini-swe-agent.traj.json");
            let venv = config.get("venv").and_then(Value::as_str).map(str::to_string);
            let python = format!("{}/bin/python", venv.unwrap_or(format!("{programs}/mini-swe-agent")));
            let mut argv: Vec<String> = [
                python.as_str(),
                "-m",
                "minisweagent.run.mini",
                "--yolo",
                "--exit-immediately",
                "--model",
                &format!("openai/{model}"),
                "--task",
                task,
                "--output",
                &trajectory,
                "--cost-limit",
                "0",
            ]
            .map(str::to_string)
            .to_vec();
            // Its model class (`litellm_textbased` for `mini_textbased.yaml`'s markdown actions).
            if let Some(class) = config.get("model_class") {
                let class = class.as_str().ok_or("model_class: not a string")?;
                argv.extend(["--model-class".to_string(), class.to_string()]);
            }
            // mini-swe-agent's own config specs (`mini.yaml`, `agent.step_limit=20`, a file);
            // its default (`mini.yaml`) when none are given.
            for spec in strings(config, "config")? {
                argv.extend(["--config".to_string(), spec]);
            }
            defaults(
                &mut env,
                [
                    ("MSWEA_CONFIGURED", "true".into()),
                    ("MSWEA_COST_TRACKING", "ignore_errors".into()),
                    ("LITELLM_LOCAL_MODEL_COST_MAP", "True".into()),
                    ("PYTHONUNBUFFERED", "1".into()),
                ],
            );
            Ok(Launch { argv, env, result: ResultFrom::MiniSweTrajectory(trajectory) })
        }
        (Some("kimi-cli"), None) => {
            // Kimi-CLI 1.52's own command line (`--print --yolo`), reached past the deprecation
            // notice its entry point now prints, with its model at the relay.
            let python = format!("{programs}/python-3.13/bin/python3.13");
            let mut driver_args = vec![KIMI_DRIVER.to_string()];
            driver_args.extend(strings(config, "args")?);
            let answer = format!("{WORK}/kimi-cli.answer");
            let mut argv =
                vec!["/bin/sh".to_string(), "-c".into(), format!("exec \"$0\" -c \"$@\" > {answer}"), python];
            argv.extend(driver_args);
            defaults(
                &mut env,
                [
                    ("LD_LIBRARY_PATH", format!("{programs}/python-3.13/lib")),
                    ("PYTHONPATH", format!("{programs}/kimi-cli")),
                    (
                        "KIMI_CONTEXT_SIZE",
                        config.get("max_context_size").and_then(Value::as_u64).unwrap_or(131_072).to_string(),
                    ),
                ],
            );
            Ok(Launch { argv, env, result: ResultFrom::File(Some(answer)) })
        }
        (Some("openhands"), None) => {
            // OpenHands' SDK default agent (`get_default_agent(llm, cli_mode=True)`: terminal,
            // file editor, task tracker; its condenser) in a local conversation on the task.
            let python = format!("{programs}/python-3.13/bin/python3.13");
            let answer = format!("{WORK}/openhands.answer");
            let argv = vec![python, "-c".into(), OPENHANDS_DRIVER.into(), answer.clone()];
            defaults(
                &mut env,
                [
                    ("LD_LIBRARY_PATH", format!("{programs}/python-3.13/lib")),
                    ("PYTHONPATH", format!("{programs}/openhands")),
                    ("LITELLM_LOCAL_MODEL_COST_MAP", "True".into()),
                    ("OPENHANDS_SUPPRESS_BANNER", "1".into()),
                ],
            );
            Ok(Launch { argv, env, result: ResultFrom::File(Some(answer)) })
        }
        (Some(other), None) => {
            let known: Vec<&str> = RELEASES.iter().map(|(n, _)| *n).collect();
            Err(format!("preset {other:?} is not known (known: {}; or give `command`)", known.join(", ")))
        }
        (None, Some(Value::String(script))) => Ok(Launch {
            argv: vec!["/bin/sh".into(), "-c".into(), fill(script)],
            env,
            result: ResultFrom::File(config.get("answer_file").and_then(Value::as_str).map(str::to_string)),
        }),
        (None, Some(Value::Array(_))) => Ok(Launch {
            argv: strings(config, "command")?.iter().map(|a| fill(a)).collect(),
            env,
            result: ResultFrom::File(config.get("answer_file").and_then(Value::as_str).map(str::to_string)),
        }),
        (None, Some(_)) => Err("command: a shell script (string) or an argv (list of strings)".into()),
        (None, None) => {
            Err("give `preset` (mini-swe-agent, kimi-cli, openhands) or `command` (the program to run)".into())
        }
    }
}

/// Adds each of `pairs` to `env` unless the config already set that variable (the config wins).
fn defaults<const N: usize>(env: &mut Vec<(String, String)>, pairs: [(&str, String); N]) {
    for (k, v) in pairs {
        if !env.iter().any(|(key, _)| key == k) {
            env.push((k.into(), v));
        }
    }
}

/// The file holding the task's instruction (also in `ORCHARD_TASK`).
pub fn task_file() -> String {
    format!("{WORK}/task.md")
}

fn strings(config: &Value, key: &str) -> Result<Vec<String>, String> {
    match config.get(key) {
        None => Ok(vec![]),
        Some(Value::Array(list)) => list
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| format!("{key}: not a list of strings")))
            .collect(),
        Some(_) => Err(format!("{key}: not a list of strings")),
    }
}

/// mini-swe-agent's exit status as the contract's.
pub fn mini_swe_status(exit_status: &str) -> RunStatus {
    match exit_status {
        "Submitted" => RunStatus::Completed,
        "LimitsExceeded" | "TimeExceeded" => RunStatus::LimitReached,
        "RepeatedFormatError" | "FormatError" => RunStatus::FormatError,
        _ => RunStatus::GaveUp,
    }
}
