//! Multi-row reads answered as one row: the database folds the rows into one JSON array of
//! arrays, which is parsed here.
//!
//! Why: sqlx's SQLite driver runs each connection on a worker thread and hands every row of an
//! answer to the caller through a channel, duplicating each value and waking the caller per
//! row. A page of 100 rollouts spent most of its 1.9 ms of server CPU in those hand-offs, and a
//! client watching a job reads such pages continuously beside the runner. One row, one hand-off.
//!
//! Invariants:
//! - Rows come back in the query's order: the aggregate itself is ordered (`ORDER BY` inside
//!   `json_group_array` / `json_agg`), not the subquery, whose order an aggregate need not keep.
//! - Floats are exact: both databases write them as text that parses back to the same `f64`
//!   (SQLite's `printf('%!.17g')`: 17 significant digits always round-trip, and its `!` form
//!   computes up to 26 of them exactly — one formatting, where `quote()` tried 15 digits, parsed
//!   them back and wrote 20 when they differed; its JSON functions write 15 digits only; sqlx
//!   asks PostgreSQL for `extra_float_digits = 2`, shortest-exact).
//! - An empty answer is an empty array on both (PostgreSQL's `json_agg` of nothing is NULL).

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::{Dialect, Result, StoreError};

/// How one column of a packed read is written into its row's array.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Col {
    /// Text, whole numbers and NULL: as the database's JSON writes them.
    Plain(&'static str),
    /// A float, as exact text (see [`float`]).
    Float(&'static str),
}

/// The statement that folds `inner`'s rows (a SELECT of at least `cols`' and `order`'s columns)
/// into one text column, `page`.
pub(crate) fn packed_sql(dialect: Dialect, cols: &[Col], inner: &str, order: &str) -> String {
    let exprs: Vec<String> = cols
        .iter()
        .map(|c| match (c, dialect) {
            (Col::Plain(name), _) => (*name).to_string(),
            (Col::Float(name), Dialect::Sqlite) => {
                format!("CASE WHEN {name} IS NULL THEN NULL ELSE printf('%!.17g', {name}) END")
            }
            (Col::Float(name), Dialect::Postgres) => format!("CAST({name} AS TEXT)"),
        })
        .collect();
    let exprs = exprs.join(", ");
    match dialect {
        Dialect::Sqlite => {
            format!("SELECT json_group_array(json_array({exprs}) ORDER BY {order}) AS page FROM ({inner}) AS p")
        }
        Dialect::Postgres => format!(
            "SELECT COALESCE(CAST(json_agg(json_build_array({exprs}) ORDER BY {order}) AS TEXT), '[]') AS page \
             FROM ({inner}) AS p"
        ),
    }
}

/// Parses a packed answer: each row's array as one `T`, whose fields are in column order.
pub(crate) fn unpack_rows<T: DeserializeOwned>(page: &str) -> Result<Vec<T>> {
    serde_json::from_str(page).map_err(|e| StoreError::Corrupt(format!("a packed page of rows: {e}")))
}

/// A float column of a packed row: exact text from either database, a number, or null.
pub(crate) fn float<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Number(f64),
    }
    match Option::<Raw>::deserialize(d)? {
        None => Ok(None),
        Some(Raw::Number(n)) => Ok(Some(n)),
        // PostgreSQL writes the infinities as words; Rust's parser takes those too.
        Some(Raw::Text(t)) => t.trim().parse().map(Some).map_err(|_| serde::de::Error::custom(format!("float {t:?}"))),
    }
}

/// A float column that is never NULL in practice: NULL reads as 0 (as the row path read it).
pub(crate) fn float_or_zero<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(float(d)?.unwrap_or(0.0))
}

/// A yes/no column of a packed row: the databases keep it as 0 or 1; `true`/`false` read too.
pub(crate) fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<bool>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bool(bool),
        Number(i64),
    }
    Ok(Option::<Raw>::deserialize(d)?.map(|r| match r {
        Raw::Bool(b) => b,
        Raw::Number(n) => n != 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Row(String, i64, #[serde(deserialize_with = "float")] Option<f64>);

    #[test]
    fn floats_read_back_exactly_from_either_form() {
        // SQLite's 17 digits of a float that 15 do not carry, and of one they do.
        let rows: Vec<Row> = unpack_rows(
            r#"[["a",1,"1796610543.6393156"],["b",2,null],["c",3,"0.10000000000000001"],["d",4,"Infinity"]]"#,
        )
        .unwrap();
        assert_eq!(rows[0].2, Some(1796610543.6393156));
        assert_eq!(rows[1].2, None);
        assert_eq!(rows[2].2, Some(0.1));
        assert_eq!(rows[3].2, Some(f64::INFINITY));
        assert!(unpack_rows::<Row>(r#"[["a",1,"one"]]"#).is_err());
    }

    #[test]
    fn the_aggregate_is_ordered_and_floats_are_text() {
        let sql = packed_sql(Dialect::Sqlite, &[Col::Plain("id"), Col::Float("r")], "SELECT id, r FROM t", "id");
        assert!(sql.contains(
            "json_group_array(json_array(id, CASE WHEN r IS NULL THEN NULL ELSE printf('%!.17g', r) END) ORDER BY id)"
        ));
        let sql = packed_sql(Dialect::Postgres, &[Col::Plain("id"), Col::Float("r")], "SELECT id, r FROM t", "id");
        assert!(sql.contains("json_agg(json_build_array(id, CAST(r AS TEXT)) ORDER BY id)"), "{sql}");
        assert!(sql.contains("'[]'"));
    }
}
