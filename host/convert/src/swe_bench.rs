//! `orchard convert swe-bench ROWS OUT`: SWE-bench-format rows (SWE-bench Full, Lite, Verified
//! and Multimodal, SWE-Gym, SWE-smith, SWE-rebench all share the fields) into one Harbor task
//! folder per instance, graded by the `swe` grader:
//!
//! ```text
//! OUT/<instance_id>/
//!   instruction.md          the problem statement (and a Multimodal row's image links)
//!   task.toml               [environment] docker_image = the instance's evaluation image,
//!                           [metadata] FAIL_TO_PASS, PASS_TO_PASS, base_commit, eval_command, ...
//!   environment/Dockerfile  FROM the image; WORKDIR the repository
//!   tests/test.patch        the tests that decide
//!   tests/gold.patch        the gold patch (read by the verifier only: which files it touches)
//!   solution/               with --gold: the gold patch and solve.sh applying it
//! ```
//!
//! The gold patch is never put in task.toml: harnesses see the task's metadata.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use orchard_test_logs::patched_files;

use crate::swe_specs::{self, RepoSpec};
use crate::{ConvertError, Report};

/// SWE-bench's published evaluation images (Docker Hub `swebench/`).
pub const DEFAULT_IMAGE_TEMPLATE: &str = "swebench/sweb.eval.x86_64.{docker_id}:latest";

#[derive(Debug, Clone)]
/// How SWE-bench instances are converted.
pub struct Options {
    /// Put the gold patch in as the reference solution (`--harness oracle` proves a conversion).
    pub gold: bool,
    /// The evaluation image's name: `{instance_id}`, `{docker_id}` (lowercase, `__` → `_1776_`,
    /// as SWE-bench names its images), `{repo}`, `{owner}`, `{name}`, `{version}`.
    pub image_template: String,
    /// Per-repository specifications over the built-in ones.
    pub specs: BTreeMap<String, RepoSpec>,
    /// Where relative paths of the specs (archives) are.
    pub specs_dir: PathBuf,
    /// The agent's time limit per task, in seconds.
    pub agent_timeout_sec: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            gold: false,
            image_template: DEFAULT_IMAGE_TEMPLATE.into(),
            specs: BTreeMap::new(),
            specs_dir: PathBuf::from("."),
            agent_timeout_sec: 3000.0,
        }
    }
}

/// Reads a specs file: `[repos."owner/name"]` tables of `RepoSpec` fields.
pub fn read_specs(path: &Path) -> Result<BTreeMap<String, RepoSpec>, ConvertError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        repos: BTreeMap<String, RepoSpec>,
    }
    let err = |reason: String| ConvertError::Input { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let file: File = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    Ok(file.repos)
}

/// Converts every row of `rows` into a task folder under `out`.
pub fn convert(rows: &Path, out: &Path, options: &Options) -> Result<Report, ConvertError> {
    let rows = crate::read_rows(rows)?;
    std::fs::create_dir_all(out).map_err(|e| ConvertError::Io { path: out.display().to_string(), source: e })?;
    let mut report = Report::default();
    let mut seen = BTreeSet::new();
    for (origin, row) in rows {
        let id = row.get("instance_id").and_then(Value::as_str).unwrap_or_default().to_string();
        let label = if id.is_empty() { origin.clone() } else { id.clone() };
        if !id.is_empty() && !seen.insert(id.clone()) {
            report.skipped.push((label, format!("{origin}: instance_id {id} appears twice; the first was kept")));
            continue;
        }
        match Instance::read(&row, options).and_then(|i| i.write(out, options)) {
            Ok(()) => report.converted.push(id),
            Err(reason) => report.skipped.push((label, format!("{origin}: {reason}"))),
        }
    }
    Ok(report)
}

/// One row, read and checked.
struct Instance {
    id: String,
    repo: String,
    version: Option<String>,
    base_commit: String,
    problem: String,
    image_assets: Vec<String>,
    test_patch: String,
    gold_patch: Option<String>,
    fail_to_pass: Vec<String>,
    pass_to_pass: Vec<String>,
    image: Option<String>,
    spec: RepoSpec,
    test_files: Vec<String>,
}

fn text(row: &Value, key: &str) -> Option<String> {
    row.get(key).and_then(Value::as_str).filter(|s| !s.trim().is_empty()).map(str::to_string)
}

/// A list of test ids: a JSON array, or JSON text of one (as the datasets store them).
fn id_list(row: &Value, key: &str) -> Result<Vec<String>, String> {
    let parsed;
    let list = match row.get(key) {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(a)) => a,
        Some(Value::String(s)) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|e| format!("{key} is text but not a JSON list: {e}"))?;
            parsed.as_array().ok_or_else(|| format!("{key} is text but not a JSON list"))?
        }
        Some(other) => return Err(format!("{key} must be a list of test ids, not {other}")),
    };
    list.iter()
        .map(|t| t.as_str().map(str::to_string).ok_or_else(|| format!("{key} holds {t}, not a test id")))
        .collect()
}

/// Quotes a word for bash when it needs it.
fn shell_word(w: &str) -> String {
    if w.chars().all(|c| c.is_ascii_alphanumeric() || "/._-:=+,@".contains(c)) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

impl Instance {
    fn read(row: &Value, options: &Options) -> Result<Instance, String> {
        let need = |key: &str| text(row, key).ok_or_else(|| format!("{key} is missing or empty"));
        let id = need("instance_id")?;
        if !id.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) || id.starts_with('.') {
            return Err(format!("instance_id {id:?} is not a folder name (letters, digits, '_', '.', '-')"));
        }
        let repo = need("repo")?;
        let base_commit = need("base_commit")?;
        let problem = need("problem_statement")?;
        let test_patch = need("test_patch")?;
        let fail_to_pass = id_list(row, "FAIL_TO_PASS")?;
        if fail_to_pass.is_empty() {
            return Err("FAIL_TO_PASS is empty: nothing would tell a fix from no fix".into());
        }
        let pass_to_pass = id_list(row, "PASS_TO_PASS")?;
        let gold_patch = text(row, "patch");
        if options.gold && gold_patch.is_none() {
            return Err("--gold: the row has no gold patch (field `patch`)".into());
        }
        let version = match row.get("version") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let image_assets = match row.get("image_assets") {
            Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok(),
            Some(v) => Some(v.clone()),
            None => None,
        }
        .map(|v| {
            let mut urls = Vec::new();
            collect_urls(&v, &mut urls);
            urls
        })
        .unwrap_or_default();
        let test_files = patched_files(&test_patch);
        // The test command: the row's own, else the specs file's, else the built-in one.
        let row_cmd = text(row, "test_cmd")
            .or_else(|| text(row, "eval_command"))
            .or_else(|| row.pointer("/install_config/test_cmd").and_then(Value::as_str).map(str::to_string));
        let known = options.specs.get(&repo).cloned().or_else(|| swe_specs::builtin(&repo));
        let spec = match (row_cmd, known) {
            (Some(cmd), known) => RepoSpec {
                test_cmd: cmd.clone(),
                framework: known.as_ref().map(|k| k.framework.clone()).unwrap_or_else(|| guess_framework(&cmd)),
                directives: known.as_ref().map(|k| k.directives).unwrap_or(swe_specs::Directives::Paths),
                ..known.unwrap_or_else(|| default_spec(&cmd))
            },
            (None, Some(spec)) => spec,
            (None, None) if !test_files.is_empty() && test_files.iter().all(|f| f.ends_with(".py")) => {
                default_spec("pytest -rA")
            }
            (None, None) => {
                return Err(format!(
                    "no test command is known for {repo} (its tests are not Python): give one in a specs file \
                     ([repos.\"{repo}\"] test_cmd, framework)"
                ));
            }
        };
        let image = text(row, "image_name").or_else(|| text(row, "docker_image")).or_else(|| {
            let template = spec.image.clone().unwrap_or_else(|| options.image_template.clone());
            let (owner, name) = repo.split_once('/').unwrap_or(("", &repo));
            let docker_id = id.to_ascii_lowercase().replace("__", "_1776_");
            let filled = template
                .replace("{instance_id}", &id)
                .replace("{docker_id}", &docker_id)
                .replace("{repo}", &repo)
                .replace("{owner}", owner)
                .replace("{name}", name)
                .replace("{version}", version.as_deref().unwrap_or(""));
            Some(filled).filter(|s| !s.is_empty())
        });
        Ok(Instance {
            id,
            repo,
            version,
            base_commit,
            problem,
            image_assets,
            test_patch,
            gold_patch,
            fail_to_pass,
            pass_to_pass,
            image,
            spec,
            test_files,
        })
    }

    fn repo_dir(&self) -> String {
        self.spec.repo_dir.clone().unwrap_or_else(|| swe_specs::SWE_BENCH_REPO_DIR.into())
    }

    fn eval_command(&self) -> String {
        let mut words = vec![self.spec.test_cmd.clone()];
        words.extend(swe_specs::directives(self.spec.directives, &self.test_files).iter().map(|w| shell_word(w)));
        let cmd = words.join(" ");
        match &self.spec.pre {
            Some(pre) if !pre.trim().is_empty() => format!("{pre} && {cmd}"),
            _ => cmd,
        }
    }

    fn task_toml(&self, options: &Options, has_archive: bool) -> String {
        let mut metadata = toml::Table::new();
        let mut put = |k: &str, v: toml::Value| {
            metadata.insert(k.into(), v);
        };
        put("source", "swe-bench".into());
        put("instance_id", self.id.clone().into());
        put("repo", self.repo.clone().into());
        if let Some(v) = &self.version {
            put("version", v.clone().into());
        }
        put("base_commit", self.base_commit.clone().into());
        put("repo_dir", self.repo_dir().into());
        put("test_framework", self.spec.framework.clone().into());
        put("eval_command", self.eval_command().into());
        let list = |l: &[String]| toml::Value::Array(l.iter().map(|s| toml::Value::from(s.clone())).collect());
        put("FAIL_TO_PASS", list(&self.fail_to_pass));
        put("PASS_TO_PASS", list(&self.pass_to_pass));
        let mut environment = toml::Table::new();
        if let Some(image) = &self.image
            && !has_archive
        {
            environment.insert("docker_image".into(), image.clone().into());
        }
        environment.insert("workdir".into(), self.repo_dir().into());
        let mut doc = toml::Table::new();
        doc.insert("version".into(), "1.0".into());
        doc.insert(
            "agent".into(),
            toml::Value::Table([("timeout_sec".to_string(), options.agent_timeout_sec.into())].into_iter().collect()),
        );
        doc.insert(
            "verifier".into(),
            toml::Value::Table(
                [("timeout_sec".to_string(), self.spec.timeout_sec.unwrap_or(1800.0).into())].into_iter().collect(),
            ),
        );
        doc.insert("environment".into(), toml::Value::Table(environment));
        doc.insert("metadata".into(), toml::Value::Table(metadata));
        toml::to_string(&doc).unwrap_or_default()
    }

    fn write(&self, out: &Path, options: &Options) -> Result<(), String> {
        let dir = out.join(&self.id);
        let io = |what: &str, e: std::io::Error| format!("writing {what}: {e}");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io("(replacing the old folder)", e))?;
        }
        for sub in ["environment", "tests"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| io(sub, e))?;
        }
        let write = |rel: &str, body: &str| std::fs::write(dir.join(rel), body).map_err(|e| io(rel, e));
        let mut instruction = self.problem.trim_end().to_string();
        if !self.image_assets.is_empty() {
            instruction.push_str("\n\nImages attached to the issue:\n");
            for url in &self.image_assets {
                instruction.push_str(&format!("- {url}\n"));
            }
        }
        write("instruction.md", &format!("{instruction}\n"))?;
        // A local archive of the repository stands in for an image that would hold it.
        let archive = self.spec.archive.as_ref().map(|a| options.specs_dir.join(a));
        let mut dockerfile = match (&self.image, &archive) {
            (Some(image), None) => format!("FROM {image}\n"),
            _ => "FROM scratch\n".to_string(),
        };
        dockerfile.push_str(&format!("WORKDIR {}\n", self.repo_dir()));
        if let Some(archive) = &archive {
            std::fs::copy(archive, dir.join("environment/repo.tar.gz"))
                .map_err(|e| format!("the specs' archive {}: {e}", archive.display()))?;
            dockerfile.push_str(&format!("ADD repo.tar.gz {}\n", self.repo_dir()));
        }
        write("environment/Dockerfile", &dockerfile)?;
        write("task.toml", &self.task_toml(options, archive.is_some()))?;
        write("tests/test.patch", &self.test_patch)?;
        if let Some(gold) = &self.gold_patch {
            write("tests/gold.patch", gold)?;
            if options.gold {
                std::fs::create_dir_all(dir.join("solution")).map_err(|e| io("solution", e))?;
                write("solution/gold.patch", gold)?;
                write(
                    "solution/solve.sh",
                    &format!(
                        "#!/bin/bash\n# The gold patch.\nset -e\ncd {}\ngit apply -v /solution/gold.patch\n",
                        shell_word(&self.repo_dir())
                    ),
                )?;
            }
        }
        Ok(())
    }
}

fn collect_urls(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.starts_with("http://") || s.starts_with("https://") => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_urls(x, out)),
        Value::Object(m) => m.values().for_each(|x| collect_urls(x, out)),
        _ => {}
    }
}

fn guess_framework(cmd: &str) -> String {
    let c = cmd.to_ascii_lowercase();
    let pick = |n: &[&str]| n.iter().any(|x| c.contains(x));
    if pick(&["runtests.py", "manage.py test"]) {
        "django"
    } else if pick(&["bin/test"]) {
        "sympy"
    } else if pick(&["jest"]) {
        "jest"
    } else if pick(&["mocha"]) {
        "mocha"
    } else if pick(&["go test"]) {
        "go"
    } else if pick(&["cargo test"]) {
        "cargo"
    } else {
        "pytest"
    }
    .into()
}

fn default_spec(cmd: &str) -> RepoSpec {
    RepoSpec {
        test_cmd: cmd.into(),
        framework: guess_framework(cmd),
        directives: swe_specs::Directives::Paths,
        pre: Some(swe_specs::SWE_BENCH_PRE.into()),
        repo_dir: None,
        image: None,
        archive: None,
        timeout_sec: None,
    }
}
