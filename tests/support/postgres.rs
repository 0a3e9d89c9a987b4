//! A real PostgreSQL server for the tests: `initdb` into a temporary directory, started on a
//! loopback port (as the unprivileged test account when the tests run as root: PostgreSQL
//! refuses root). `ORCHARD_TEST_POSTGRES_URL` points at one already running instead.

use std::path::PathBuf;
use std::process::Command;

pub struct Postgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub url: String,
    dir: Option<PathBuf>,
    run_as: Option<&'static str>,
}

fn bin(name: &str) -> PathBuf {
    let debian = PathBuf::from("/usr/lib/postgresql");
    if let Ok(versions) = std::fs::read_dir(&debian) {
        let mut found: Vec<PathBuf> =
            versions.flatten().map(|v| v.path().join("bin").join(name)).filter(|p| p.is_file()).collect();
        found.sort();
        if let Some(p) = found.pop() {
            return p;
        }
    }
    PathBuf::from(name)
}

impl Postgres {
    pub fn start() -> Postgres {
        if let Ok(url) = std::env::var("ORCHARD_TEST_POSTGRES_URL") {
            return Postgres { url, dir: None, run_as: None };
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("orchard-pg-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = nix::unistd::geteuid().is_root();
        let run_as = root.then_some("orchard-test");
        if root {
            Command::new("chown").arg("-R").arg("orchard-test").arg(&dir).status().unwrap();
        }
        let sh = |script: String| {
            let mut cmd = match run_as {
                Some(user) => {
                    let mut c = Command::new("su");
                    c.args([user, "-s", "/bin/sh", "-c", &script]);
                    c
                }
                None => {
                    let mut c = Command::new("sh");
                    c.args(["-c", &script]);
                    c
                }
            };
            let out = cmd.output().expect("run postgres tools");
            assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let data = dir.join("data");
        sh(format!("{} -D {} -U postgres --auth=trust -E UTF8 >/dev/null", bin("initdb").display(), data.display()));
        sh(format!(
            "{} -D {} -o '-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off' -l {} -w start >/dev/null",
            bin("pg_ctl").display(),
            data.display(),
            dir.display(),
            dir.join("log").display()
        ));
        Postgres { url: format!("postgres://postgres@127.0.0.1:{port}/postgres"), dir: Some(dir), run_as }
    }

    /// A fresh database of its own on this server, for one test.
    pub async fn database(&self, name: &str) -> String {
        sqlx_free_admin(&self.url, &format!("DROP DATABASE IF EXISTS {name}")).await;
        sqlx_free_admin(&self.url, &format!("CREATE DATABASE {name}")).await;
        let (base, _) = self.url.rsplit_once('/').unwrap();
        format!("{base}/{name}")
    }
}

/// Runs one statement with `psql` (the tests need no database driver of their own).
async fn sqlx_free_admin(url: &str, statement: &str) {
    let out =
        tokio::process::Command::new(bin("psql")).args([url, "-q", "-c", statement]).output().await.expect("psql");
    assert!(out.status.success(), "{statement}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let Some(dir) = &self.dir else { return };
        let script =
            format!("{} -D {} -m immediate stop >/dev/null 2>&1", bin("pg_ctl").display(), dir.join("data").display());
        let _ = match self.run_as {
            Some(user) => Command::new("su").args([user, "-s", "/bin/sh", "-c", &script]).status(),
            None => Command::new("sh").args(["-c", &script]).status(),
        };
        let _ = std::fs::remove_dir_all(dir);
    }
}
