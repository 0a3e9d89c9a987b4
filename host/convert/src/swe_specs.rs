//! How each repository's tests run in its SWE-bench evaluation image: the command, the test
//! framework its log is parsed as, and how test files become the command's arguments. These
//! follow the per-repository specifications SWE-bench's harness keeps (the common case of each
//! repository; a version that differs can be given in a specs file).

use serde::Deserialize;

/// How test files named by the test patch become arguments of the test command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Directives {
    /// The file paths as they are (pytest, sympy's bin/test).
    Paths,
    /// Django's runner: `tests/a/test_b.py` → `a.test_b`.
    DjangoModules,
    /// No arguments: the command runs what it runs.
    None,
}

/// One repository's test setup (fields of a specs file's `[repos."owner/name"]` table).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoSpec {
    pub test_cmd: String,
    /// `pytest`, `django`, `sympy`, `jest`, `mocha`, `go`, `cargo`, ... (the `swe` grader's names).
    pub framework: String,
    #[serde(default = "paths")]
    pub directives: Directives,
    /// Run before the test command (an environment's activation).
    #[serde(default)]
    pub pre: Option<String>,
    /// Where the repository is in the image.
    #[serde(default)]
    pub repo_dir: Option<String>,
    /// An image name template for this repository, overriding the global one ("" for none:
    /// the evaluation's `--image`).
    #[serde(default)]
    pub image: Option<String>,
    /// A local archive of the repository (with its `.git`) unpacked at `repo_dir`, for images
    /// that do not hold it (a path relative to the specs file).
    #[serde(default)]
    pub archive: Option<String>,
    #[serde(default)]
    pub timeout_sec: Option<f64>,
}

fn paths() -> Directives {
    Directives::Paths
}

/// SWE-bench's evaluation images: the repository at /testbed in the conda env `testbed`.
pub const SWE_BENCH_PRE: &str = "source /opt/miniconda3/bin/activate && conda activate testbed";
pub const SWE_BENCH_REPO_DIR: &str = "/testbed";

/// The built-in specifications, by repository.
pub fn builtin(repo: &str) -> Option<RepoSpec> {
    let spec = |cmd: &str, framework: &str, directives: Directives| RepoSpec {
        test_cmd: cmd.into(),
        framework: framework.into(),
        directives,
        pre: Some(SWE_BENCH_PRE.into()),
        repo_dir: None,
        image: None,
        archive: None,
        timeout_sec: None,
    };
    Some(match repo {
        "django/django" => spec(
            "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
            "django",
            Directives::DjangoModules,
        ),
        "sympy/sympy" => spec(
            "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
            "sympy",
            Directives::Paths,
        ),
        "sphinx-doc/sphinx" => spec("tox --current-env -epy39 -v --", "pytest", Directives::Paths),
        "mwaskom/seaborn" => spec("pytest --no-header -rA", "pytest", Directives::Paths),
        "astropy/astropy"
        | "matplotlib/matplotlib"
        | "scikit-learn/scikit-learn"
        | "pydata/xarray"
        | "pytest-dev/pytest"
        | "psf/requests"
        | "pylint-dev/pylint"
        | "pallets/flask"
        | "sqlfluff/sqlfluff"
        | "pvlib/pvlib-python"
        | "pydicom/pydicom"
        | "pylint-dev/astroid"
        | "pyvista/pyvista"
        | "marshmallow-code/marshmallow" => spec("pytest -rA", "pytest", Directives::Paths),
        _ => return None,
    })
}

/// The command's arguments for the test files `files`.
pub fn directives(kind: Directives, files: &[String]) -> Vec<String> {
    match kind {
        Directives::None => vec![],
        Directives::Paths => files.to_vec(),
        Directives::DjangoModules => files
            .iter()
            .filter(|f| f.ends_with(".py"))
            .map(|f| f.trim_start_matches("tests/").trim_end_matches(".py").replace('/', "."))
            .collect(),
    }
}
