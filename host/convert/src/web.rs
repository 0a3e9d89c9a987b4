//! Live-web browsing datasets into Harbor task folders graded by the `judge` grader:
//!
//! - WebVoyager rows `{web_name, id, ques, web}` (JSONL) — judged WebVoyager-style;
//! - Online-Mind2Web rows `{task_id, confirmed_task, website, reference_length}` (a JSON array)
//!   — judged WebJudge-style, as its leaderboard is;
//! - DeepShop rows (WebVoyager's fields plus `attribute`, `filter`, `sort`, `category`,
//!   `difficulty`) — judged WebJudge-style with the row's attribute, filter and sort
//!   requirements as the key points, DeepShop's fine-grained aspects.
//!
//! Their sites are on the internet: the tasks say `allow_internet = true`. `environment` and
//! `start_url` let a local site stand in (a copy of its environment folder goes into each task,
//! and the start URL is replaced), which is how the conversion is tested offline.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{ConvertError, Report};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Which web benchmark.
pub enum Dataset {
    /// WebVoyager.
    WebVoyager,
    /// Online-Mind2Web.
    OnlineMind2Web,
    /// DeepShop.
    DeepShop,
}

#[derive(Debug, Clone)]
/// How a web benchmark is converted.
pub struct Options {
    /// Which benchmark the input is.
    pub dataset: Dataset,
    /// The agent's time limit per task, in seconds.
    pub agent_timeout_sec: f64,
    /// An environment folder (a Dockerfile and what it copies) put into every task: a local
    /// site standing in for the real one.
    pub environment: Option<PathBuf>,
    /// Replaces every row's start URL (with `environment`, the local site's address).
    pub start_url: Option<String>,
}

/// One row, read and checked.
struct Row {
    id: String,
    question: String,
    start_url: String,
    site: String,
    /// (key, value) kept in `[metadata]`.
    extra: Vec<(String, Value)>,
    key_points: Vec<String>,
}

fn text(row: &Value, key: &str) -> Option<String> {
    row.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string)
}

impl Row {
    fn read(row: &Value, dataset: Dataset) -> Result<Row, String> {
        let need = |key: &str| text(row, key).ok_or_else(|| format!("no {key}"));
        Ok(match dataset {
            Dataset::WebVoyager | Dataset::DeepShop => {
                let mut extra = vec![("web_name".to_string(), Value::from(need("web_name")?))];
                let mut key_points = Vec::new();
                if dataset == Dataset::DeepShop {
                    for key in ["category", "difficulty"] {
                        if let Some(v) = text(row, key) {
                            extra.push((key.into(), Value::from(v)));
                        }
                    }
                    // DeepShop's fine-grained aspects; "None" where the query has none.
                    for key in ["attribute", "filter", "sort"] {
                        if let Some(v) = text(row, key).filter(|v| v != "None") {
                            extra.push((key.into(), Value::from(v.clone())));
                            key_points.push(v);
                        }
                    }
                }
                Row {
                    id: need("id")?,
                    question: need("ques")?,
                    start_url: need("web")?,
                    site: need("web_name")?,
                    extra,
                    key_points,
                }
            }
            Dataset::OnlineMind2Web => {
                let website = need("website")?;
                let mut extra = vec![("website".to_string(), Value::from(website.clone()))];
                if let Some(n) = row.get("reference_length").filter(|v| v.is_number()) {
                    extra.push(("reference_length".into(), n.clone()));
                }
                if let Some(level) = text(row, "level") {
                    extra.push(("level".into(), Value::from(level)));
                }
                Row {
                    id: need("task_id")?,
                    question: need("confirmed_task")?,
                    start_url: website.clone(),
                    site: website,
                    extra,
                    key_points: Vec::new(),
                }
            }
        })
    }

    /// A folder name: the id with anything but letters, digits, `-`, `_` and `.` replaced.
    fn folder(&self) -> String {
        let safe: String =
            self.id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
        safe.trim_start_matches('.').to_string()
    }

    fn write(&self, out: &Path, options: &Options) -> Result<String, String> {
        let folder = self.folder();
        if folder.is_empty() {
            return Err(format!("id {:?} makes no folder name", self.id));
        }
        let dir = out.join(&folder);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let start = options.start_url.clone().unwrap_or_else(|| self.start_url.clone());
        let instruction = format!(
            "{}\n\nStart at {start} ({}). When you are done, give your final answer.\n",
            self.question, self.site
        );
        std::fs::write(dir.join("instruction.md"), instruction).map_err(|e| e.to_string())?;
        let judge = match options.dataset {
            Dataset::WebVoyager => "webvoyager",
            Dataset::OnlineMind2Web | Dataset::DeepShop => "webjudge",
        };
        let mut metadata = toml::map::Map::new();
        metadata.insert("source".into(), dataset_name(options.dataset).into());
        metadata.insert("task_id".into(), self.id.clone().into());
        metadata.insert("start_url".into(), start.into());
        metadata.insert("judge".into(), judge.into());
        for (k, v) in &self.extra {
            if let Ok(v) = serde_json::from_value::<toml::Value>(v.clone()) {
                metadata.insert(k.clone(), v);
            }
        }
        if !self.key_points.is_empty() {
            metadata.insert("key_points".into(), self.key_points.clone().into());
        }
        let mut doc = toml::map::Map::new();
        doc.insert("version".into(), "1.0".into());
        let mut agent = toml::map::Map::new();
        agent.insert("timeout_sec".into(), options.agent_timeout_sec.into());
        doc.insert("agent".into(), agent.into());
        let mut environment = toml::map::Map::new();
        environment.insert("allow_internet".into(), options.environment.is_none().into());
        doc.insert("environment".into(), environment.into());
        doc.insert("metadata".into(), metadata.into());
        let toml = toml::to_string(&toml::Value::Table(doc)).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("task.toml"), toml).map_err(|e| e.to_string())?;
        if let Some(env) = &options.environment {
            crate::copy_dir(env, &dir.join("environment")).map_err(|e| format!("copying {}: {e}", env.display()))?;
        }
        Ok(folder)
    }
}

fn dataset_name(d: Dataset) -> &'static str {
    match d {
        Dataset::WebVoyager => "webvoyager",
        Dataset::OnlineMind2Web => "online-mind2web",
        Dataset::DeepShop => "deepshop",
    }
}

/// Converts every row of `rows` into a task folder under `out`.
pub fn convert(rows: &Path, out: &Path, options: &Options) -> Result<Report, ConvertError> {
    if let Some(env) = &options.environment
        && !env.join("Dockerfile").is_file()
    {
        return Err(ConvertError::Input {
            path: env.display().to_string(),
            reason: "an environment folder holds a Dockerfile".into(),
        });
    }
    let rows = crate::read_rows(rows)?;
    std::fs::create_dir_all(out).map_err(|e| ConvertError::Io { path: out.display().to_string(), source: e })?;
    let mut report = Report::default();
    let mut seen = BTreeSet::new();
    for (origin, row) in rows {
        match Row::read(&row, options.dataset) {
            Ok(r) if !seen.insert(r.folder()) => {
                report.skipped.push((r.id.clone(), format!("{origin}: id {} appears twice; the first was kept", r.id)))
            }
            Ok(r) => match r.write(out, options) {
                Ok(folder) => report.converted.push(folder),
                Err(reason) => report.skipped.push((r.id.clone(), format!("{origin}: {reason}"))),
            },
            Err(reason) => report.skipped.push((origin.clone(), format!("{origin}: {reason}"))),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(dataset: Dataset) -> Options {
        Options { dataset, agent_timeout_sec: 600.0, environment: None, start_url: None }
    }

    fn read_toml(p: &Path) -> toml::Value {
        toml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    #[test]
    fn each_dataset_becomes_judged_task_folders() {
        let dir = tempfile::tempdir().unwrap();
        let wv = dir.path().join("wv.jsonl");
        std::fs::write(
            &wv,
            "{\"web_name\": \"Allrecipes\", \"id\": \"Allrecipes--0\", \"ques\": \"Find a vegan lasagna.\", \"web\": \"https://www.allrecipes.com/\"}\n\
             {\"web_name\": \"Allrecipes\", \"id\": \"Allrecipes--0\", \"ques\": \"again\", \"web\": \"https://x/\"}\n\
             {\"web_name\": \"Apple\", \"ques\": \"no id\", \"web\": \"https://apple.com\"}\n",
        )
        .unwrap();
        let out = dir.path().join("out");
        let report = convert(&wv, &out, &options(Dataset::WebVoyager)).unwrap();
        assert_eq!(report.converted, ["Allrecipes--0"]);
        assert_eq!(report.skipped.len(), 2, "{:?}", report.skipped);
        assert!(report.skipped[0].1.contains("appears twice") && report.skipped[1].1.contains("no id"));
        let t = read_toml(&out.join("Allrecipes--0/task.toml"));
        assert_eq!(t["metadata"]["judge"].as_str(), Some("webvoyager"));
        assert_eq!(t["environment"]["allow_internet"].as_bool(), Some(true));
        let instruction = std::fs::read_to_string(out.join("Allrecipes--0/instruction.md")).unwrap();
        assert!(
            instruction.starts_with("Find a vegan lasagna.") && instruction.contains("https://www.allrecipes.com/")
        );

        let m2w = dir.path().join("m2w.json");
        std::fs::write(&m2w, r#"[{"task_id": "abc/1", "confirmed_task": "Find a flight.", "website": "https://www.united.com/", "reference_length": 7, "level": "easy"}]"#).unwrap();
        let report = convert(&m2w, &out, &options(Dataset::OnlineMind2Web)).unwrap();
        assert_eq!(report.converted, ["abc_1"]);
        let t = read_toml(&out.join("abc_1/task.toml"));
        assert_eq!(t["metadata"]["judge"].as_str(), Some("webjudge"));
        assert_eq!(t["metadata"]["reference_length"].as_integer(), Some(7));

        let ds = dir.path().join("ds.jsonl");
        std::fs::write(&ds, r#"{"web_name": "Amazon", "id": "Amazon--14", "ques": "Find a surge protector.", "web": "https://www.amazon.com/", "attribute": "6 to 8 outlets", "filter": "4+ stars", "sort": "None", "category": "Electronics", "difficulty": "easy"}"#).unwrap();
        let shop = dir.path().join("site");
        std::fs::create_dir_all(&shop).unwrap();
        std::fs::write(shop.join("Dockerfile"), "FROM scratch\n").unwrap();
        let mut local = options(Dataset::DeepShop);
        local.environment = Some(shop);
        local.start_url = Some("http://127.0.0.1:8080/".into());
        convert(&ds, &out, &local).unwrap();
        let t = read_toml(&out.join("Amazon--14/task.toml"));
        let points: Vec<&str> =
            t["metadata"]["key_points"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(points, ["6 to 8 outlets", "4+ stars"]);
        assert_eq!(t["metadata"]["start_url"].as_str(), Some("http://127.0.0.1:8080/"));
        assert_eq!(t["environment"]["allow_internet"].as_bool(), Some(false));
        assert!(out.join("Amazon--14/environment/Dockerfile").is_file());
    }
}
