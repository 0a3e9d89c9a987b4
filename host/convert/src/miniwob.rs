//! MiniWoB++ (MIT; its pages ship in the `miniwob` package on PyPI, under `miniwob/html`, and in
//! its repository's `html/`) into Harbor task folders: one per page, graded by the `script`
//! grader from the reward the page's own `core.endEpisode` gives.
//!
//! The pages and a small server of ours (`assets/miniwob/serve.py`) are written once, to
//! `OUT/_miniwob/environment`; each task's `environment` links there. The server starts each
//! episode at once, seeded, with the 10 s limit lifted (as BrowserGym does), and keeps the first
//! reward each page reports; the task's `tests/test.sh` turns it into `reward.txt` (1 when
//! positive). The task lists no solution: its agent must browse.

use std::path::{Path, PathBuf};

use crate::{ConvertError, Report};

const SERVE: &str = include_str!("../assets/miniwob/serve.py");
const TEST: &str = include_str!("../assets/miniwob/test.sh");

#[derive(Debug, Clone)]
/// How MiniWoB++ tasks are converted.
pub struct Options {
    /// Only these pages (names without `.html`); all when empty.
    pub envs: Vec<String>,
    /// The episodes' seed (each page's is this and its name).
    pub seed: u64,
    /// The agent's time limit per task, in seconds.
    pub agent_timeout_sec: f64,
}

/// The `html` folder of a MiniWoB++ copy: `DIR` itself, `DIR/html` or `DIR/miniwob/html`.
fn html_root(dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), dir.join("html"), dir.join("miniwob/html")]
        .into_iter()
        .find(|d| d.join("core/core.js").is_file() && d.join("miniwob").is_dir())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Io { path: path.display().to_string(), source }
}

/// Converts the pages of the MiniWoB++ copy at `dir` into task folders under `out`.
pub fn convert(dir: &Path, out: &Path, options: &Options) -> Result<Report, ConvertError> {
    let html = html_root(dir).ok_or_else(|| ConvertError::Input {
        path: dir.display().to_string(),
        reason: "not a MiniWoB++ copy: no core/core.js and miniwob/ here, in html/ or in miniwob/html/".into(),
    })?;
    let mut pages: Vec<String> = std::fs::read_dir(html.join("miniwob"))
        .map_err(io(&html))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".html").map(str::to_string))
        .collect();
    pages.sort();
    let mut report = Report::default();
    for wanted in &options.envs {
        if !pages.contains(wanted) {
            report.skipped.push((wanted.clone(), format!("no page miniwob/{wanted}.html")));
        }
    }
    if !options.envs.is_empty() {
        pages.retain(|p| options.envs.contains(p));
    }
    // The shared environment: the pages and the server, with its Dockerfile.
    let shared = out.join("_miniwob/environment");
    let _ = std::fs::remove_dir_all(&shared);
    crate::copy_dir(&html, &shared.join("html")).map_err(io(&shared))?;
    std::fs::write(shared.join("serve.py"), SERVE).map_err(io(&shared))?;
    std::fs::write(
        shared.join("Dockerfile"),
        "FROM python:3.12-slim\nWORKDIR /miniwob\nCOPY html /miniwob/html\nCOPY serve.py /miniwob/serve.py\n\
         CMD [\"python3\", \"/miniwob/serve.py\", \"--port\", \"8080\", \"--root\", \"/miniwob/html\"]\n\
         HEALTHCHECK --interval=1s CMD python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/core/core.js')\"\n",
    )
    .map_err(io(&shared))?;
    for page in pages {
        let name = format!("miniwob.{page}");
        let task = out.join(&name);
        let _ = std::fs::remove_dir_all(&task);
        std::fs::create_dir_all(task.join("tests")).map_err(io(&task))?;
        std::os::unix::fs::symlink("../_miniwob/environment", task.join("environment")).map_err(io(&task))?;
        let url = format!("http://127.0.0.1:8080/miniwob/{page}.html");
        std::fs::write(
            task.join("instruction.md"),
            format!(
                "Open {url} in the browser. The page shows a small task at its top (the yellow box): do what it \
                 says, on the page. Its first attempt is the one that counts.\n"
            ),
        )
        .map_err(io(&task))?;
        std::fs::write(task.join("tests/test.sh"), TEST.replace("__ENV__", &page)).map_err(io(&task))?;
        let toml = format!(
            "version = \"1.0\"\n\n[agent]\ntimeout_sec = {}\n\n[verifier]\ntimeout_sec = 60\n\n\
             [environment]\nenv = {{ MINIWOB_SEED = \"{}\" }}\n\n\
             [metadata]\nsource = \"miniwob\"\nenv = \"{page}\"\nseed = {}\nstart_url = \"{url}\"\n",
            options.agent_timeout_sec, options.seed, options.seed
        );
        std::fs::write(task.join("task.toml"), toml).map_err(io(&task))?;
        report.converted.push(name);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_becomes_one_task_per_page_over_one_shared_environment() {
        let dir = tempfile::tempdir().unwrap();
        let html = dir.path().join("pkg/miniwob/html");
        std::fs::create_dir_all(html.join("core")).unwrap();
        std::fs::create_dir_all(html.join("miniwob")).unwrap();
        std::fs::write(html.join("core/core.js"), "var core = {};").unwrap();
        for p in ["click-test", "enter-text"] {
            std::fs::write(html.join(format!("miniwob/{p}.html")), "<html></html>").unwrap();
        }
        let out = dir.path().join("out");
        let options = Options { envs: vec!["click-test".into(), "nope".into()], seed: 7, agent_timeout_sec: 120.0 };
        let report = convert(&dir.path().join("pkg"), &out, &options).unwrap();
        assert_eq!(report.converted, ["miniwob.click-test"]);
        assert_eq!(report.skipped[0].0, "nope");
        let task = out.join("miniwob.click-test");
        assert!(task.join("environment/Dockerfile").is_file());
        assert!(task.join("environment/html/core/core.js").is_file());
        assert!(std::fs::read_to_string(task.join("tests/test.sh")).unwrap().contains("\"click-test\""));
        let toml: toml::Value = toml::from_str(&std::fs::read_to_string(task.join("task.toml")).unwrap()).unwrap();
        assert_eq!(toml["environment"]["env"]["MINIWOB_SEED"].as_str(), Some("7"));
        assert!(convert(dir.path(), &out, &options).is_err_and(|e| e.to_string().contains("not a MiniWoB++ copy")));
    }
}
