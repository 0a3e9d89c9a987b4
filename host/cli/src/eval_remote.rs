//! `orchard eval --server URL`: the same job, run by an Orchard server. The task folders are
//! uploaded (`POST /v1/datasets`), the job submitted (`POST /v1/evals`) and followed over
//! server-sent events with the same progress bar; at its end the results are read back
//! (`export?format=results`) for the same tables and, with `--out`, the same files.
//! Ctrl-C detaches: the job goes on, and `--follow ID` re-attaches.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use orchard_eval::RolloutResult;
use orchard_scheduler::TaskSource;
use serde_json::Value;

use crate::eval::{EvalArgs, counts_message, print_tables, progress_bar};

/// Talks to one server with one key.
struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Client {
    fn new(server: &str, key: Option<String>) -> anyhow::Result<Client> {
        let base = server.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--server {server}: expected an http:// or https:// URL");
        }
        let http = reqwest::Client::builder().connect_timeout(Duration::from_secs(10)).build()?;
        Ok(Client { http, base, key })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.header("X-API-Key", k),
            None => r,
        }
    }

    /// Sends, and turns an error answer into a message with the server's own explanation.
    async fn send(&self, what: &str, r: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let resp = r.send().await.with_context(|| format!("{what}: {}", self.base))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let detail = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["detail"].as_str().map(String::from))
            .unwrap_or(text);
        match status.as_u16() {
            401 | 403 => {
                bail!("{what}: the server refused the key ({status}): {detail}; set ORCHARD_API_KEY or --server-key")
            }
            _ => bail!("{what}: {status}: {detail}"),
        }
    }

    async fn json(&self, what: &str, r: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        self.send(what, r).await?.json().await.with_context(|| format!("{what}: not JSON"))
    }
}

pub async fn run(args: &EvalArgs, server: &str) -> anyhow::Result<i32> {
    let client = Client::new(server, args.server_key.clone())?;
    let id = match &args.follow {
        Some(id) => id.clone(),
        None => submit(&client, args).await?,
    };
    let eval = client.json("reading the job", client.request(reqwest::Method::GET, &format!("/v1/evals/{id}"))).await?;
    let spec = &eval["spec"];
    eprintln!(
        "orchard eval: {} rollouts ({} attempts) with {} graded by {} on {server}; job {id}",
        eval["total"],
        spec["attempts"],
        spec["harnesses"]
            .as_array()
            .map(|h| h.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" and "))
            .unwrap_or_default(),
        spec["grader"].as_str().unwrap_or("?"),
    );
    eprintln!(
        "orchard eval: Ctrl-C detaches (the job goes on); `orchard eval --server {server} --follow {id}` re-attaches"
    );
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out.join("rollouts")).with_context(|| format!("--out {}", out.display()))?;
    }
    let total = eval["total"].as_u64().unwrap_or(0);
    let finished = follow(&client, &id, total, args.out.as_deref()).await?;
    let Some(status) = finished else {
        eprintln!("orchard eval: detached from {id}; it goes on on the server");
        return Ok(130);
    };
    let results = download(&client, &id).await?;
    let k = eval["k"].as_u64().unwrap_or(1) as u32;
    let summary = orchard_eval::summarize(&results, k);
    if let Some(out) = &args.out {
        orchard_eval::write_outputs(out, &results, &summary)?;
    }
    print_tables(&summary);
    if let Some(out) = &args.out {
        println!("results: {}", out.display());
    }
    println!("job: {server}/ui/evals/{id}");
    if status == "cancelled" {
        eprintln!("orchard eval: the job was cancelled on the server");
    }
    Ok(0)
}

/// Uploads the tasks (or names the server's dataset) and submits the job: its id.
async fn submit(client: &Client, args: &EvalArgs) -> anyhow::Result<String> {
    // Plugins are the server's: a local .wasm has to be uploaded first.
    let local_file = args
        .harnesses
        .iter()
        .chain(&args.tools)
        .chain(&args.grader)
        .find(|arg| arg.ends_with(".wasm") || Path::new(arg).is_file());
    if let Some(file) = local_file {
        bail!(
            "{file}: a plugin file cannot be run by a server; upload it (PUT /v1/plugins/NAME with the component) \
             and name it instead"
        );
    }
    let tasks = match (&args.dataset, args.tasks.as_slice()) {
        (Some(name), _) => TaskSource::Dataset(name.clone()),
        (None, [_, _, ..]) => bail!("TASKS: one folder with --server (put the task folders of several domains in one)"),
        (None, [dir]) => {
            let dir = dir.clone();
            let archive = tokio::task::spawn_blocking(move || pack_tasks(&dir)).await??;
            let size = archive.len();
            let uploaded = client
                .json(
                    "uploading the tasks",
                    client
                        .request(reqwest::Method::POST, "/v1/datasets")
                        .header("content-type", "application/gzip")
                        .body(archive),
                )
                .await?;
            let id = uploaded["id"].as_str().context("the server answered no dataset id")?.to_string();
            eprintln!(
                "orchard eval: uploaded {} tasks ({} KiB) as {id}",
                uploaded["tasks"].as_array().map_or(0, Vec::len),
                size.div_ceil(1024)
            );
            TaskSource::Archive(id)
        }
        (None, []) => bail!("TASKS: a task folder (or --dataset NAME) is needed"),
    };
    if args.api_key.is_some() && args.api_key_secret.is_none() && args.model.is_some() {
        eprintln!(
            "orchard eval: the model key in --api-key / OPENAI_API_KEY stays here; name a server-side secret \
             with --api-key-secret (PUT /v1/secrets/NAME) for the server to use one"
        );
    }
    let spec = args.spec_with(tasks, String::clone, args.api_key_secret.clone())?;
    let body = serde_json::to_value(&spec)?;
    let job = client.json("submitting the job", client.request(reqwest::Method::POST, "/v1/evals").json(&body)).await?;
    job["id"].as_str().map(String::from).context("the server answered no job id")
}

/// A `.tar.gz` of a task folder (as a folder of that name) or of a folder of task folders.
/// Symbolic links go as links (the server refuses any that lead outside the archive).
fn pack_tasks(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let tasks = orchard_eval::load_tasks(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let root = std::fs::canonicalize(dir).with_context(|| dir.display().to_string())?;
    let single = root.join("instruction.md").is_file() || root.join("task.toml").is_file();
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
    tar.follow_symlinks(false);
    if single {
        let name = root.file_name().context("the task folder has no name")?;
        tar.append_dir_all(name, &root)?;
    } else {
        for task in &tasks {
            tar.append_dir_all(&task.id, root.join(&task.id))?;
        }
    }
    Ok(tar.into_inner()?.finish()?)
}

/// One server-sent event.
#[derive(Default)]
struct Event {
    name: String,
    id: Option<String>,
    data: String,
}

/// Follows the job's events to its end (`Some(status)`) or Ctrl-C (`None`), reconnecting with
/// `Last-Event-ID` when the connection drops. Each finished rollout's result is written to
/// `out/rollouts/` as it comes, like a local run does.
async fn follow(client: &Client, id: &str, total: u64, out: Option<&Path>) -> anyhow::Result<Option<String>> {
    let bar = progress_bar(total);
    let mut last_id: Option<String> = None;
    let mut failures = 0;
    loop {
        let mut r = client.request(reqwest::Method::GET, &format!("/v1/evals/{id}/events"));
        if let Some(last) = &last_id {
            r = r.header("Last-Event-ID", last);
        }
        let resp = tokio::select! {
            resp = client.send("following the job", r) => resp,
            _ = tokio::signal::ctrl_c() => { bar.abandon(); return Ok(None) }
        };
        let resp = match resp {
            Ok(resp) => resp,
            Err(e) if failures < 30 => {
                failures += 1;
                bar.suspend(|| eprintln!("orchard eval: {e:#}; trying again"));
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        failures = 0;
        let mut body = resp.bytes_stream();
        let mut buffer = String::new();
        loop {
            let chunk = tokio::select! {
                chunk = body.next() => chunk,
                _ = tokio::signal::ctrl_c() => { bar.abandon(); return Ok(None) }
            };
            let Some(Ok(chunk)) = chunk else { break };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let event = parse_event(&block);
                if event.id.is_some() {
                    last_id = event.id.clone();
                }
                let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                match event.name.as_str() {
                    "rollout" => {
                        if let Some(e) = data["error"].as_str() {
                            bar.suspend(|| eprintln!("{}: {e}", data["rollout_id"].as_str().unwrap_or("?")));
                        }
                        if let (Some(out), Some(rid)) = (out, data["rollout_id"].as_str()) {
                            save_rollout(client, id, rid, out).await;
                        }
                    }
                    "counts" => {
                        let c = &data["counts"];
                        let n = |k: &str| c[k].as_i64().unwrap_or(0);
                        bar.set_position(n("done") as u64);
                        bar.set_message(counts_message(
                            n("passed"),
                            n("graded") - n("passed"),
                            n("unknown"),
                            n("errored"),
                        ));
                    }
                    "end" => {
                        bar.finish();
                        return Ok(Some(data["status"].as_str().unwrap_or("done").to_string()));
                    }
                    _ => {}
                }
            }
        }
        // The stream ended without `end`: the server restarted or the connection dropped.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn parse_event(block: &str) -> Event {
    let mut event = Event { name: "message".into(), ..Default::default() };
    for line in block.lines() {
        let (field, value) =
            line.split_once(':').map(|(f, v)| (f, v.strip_prefix(' ').unwrap_or(v))).unwrap_or((line, ""));
        match field {
            "event" => event.name = value.to_string(),
            "id" => event.id = Some(value.to_string()),
            "data" => {
                if !event.data.is_empty() {
                    event.data.push('\n');
                }
                event.data.push_str(value);
            }
            _ => {}
        }
    }
    event
}

/// Writes one finished rollout's result to `out/rollouts/<id>.json` as it finishes (its
/// trajectory goes to `trajectories.jsonl` at the end, as in a local run). Best effort: the
/// full set is written again at the end.
async fn save_rollout(client: &Client, eval: &str, rollout: &str, out: &Path) {
    let r = client.request(reqwest::Method::GET, &format!("/v1/evals/{eval}/rollouts/{rollout}"));
    if let Ok(mut v) = client.json("reading a rollout", r).await {
        let result = v["result"].take();
        if result.is_object() {
            let json = serde_json::to_vec_pretty(&result).unwrap_or_default();
            let _ = orchard_eval::write_rollout(out, rollout, &json);
        }
    }
}

/// Every finished rollout's result with its trajectory.
async fn download(client: &Client, id: &str) -> anyhow::Result<Vec<RolloutResult>> {
    let resp = client
        .send(
            "reading the results",
            client.request(reqwest::Method::GET, &format!("/v1/evals/{id}/export?format=results")),
        )
        .await?;
    let mut body = resp.bytes_stream();
    let mut buffer = Vec::new();
    let mut results = Vec::new();
    while let Some(chunk) = body.next().await {
        buffer.extend_from_slice(&chunk.context("reading the results")?);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            if line.len() > 1 {
                // The trajectory is not part of a result's own fields (it is written apart).
                let mut value: Value = serde_json::from_slice(&line).context("a result the server sent")?;
                let trajectory = value["trajectory"].take();
                let mut result: RolloutResult = serde_json::from_value(value).context("a result the server sent")?;
                result.trajectory = serde_json::from_value(trajectory).unwrap_or_default();
                results.push(result);
            }
        }
    }
    Ok(results)
}
