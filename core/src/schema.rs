//! The shape of a report's JSON: the set of its key paths, which each
//! report's golden test pins, so a field renamed or dropped on the way to
//! typed reading fails a test instead of going unseen.
//!
//! A path joins keys with `.`; an array's elements are walked through its
//! first (`runs[].phase`), since every element of a report's array has the
//! one shape. A value that is `null` is a leaf: a golden test fills its
//! optional parts so that their keys show.
//!
//! ```
//! let v = serde_json::json!({"meta": {"commit": "c"}, "runs": [{"phase": "read"}]});
//! let keys = fabkit_core::schema::key_paths(&v);
//! assert_eq!(keys, ["meta", "meta.commit", "runs", "runs[].phase"]);
//! ```

use std::collections::BTreeSet;

use serde_json::Value;

/// Every key path of `v`, sorted.
pub fn key_paths(v: &Value) -> Vec<String> {
    let mut out = BTreeSet::new();
    walk(v, "", &mut out);
    out.into_iter().collect()
}

fn walk(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                walk(x, &p, out);
                out.insert(p);
            }
        }
        Value::Array(a) => {
            if let Some(first) = a.first() {
                walk(first, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// Compares `v`'s key paths with `expected`: `Err` names every path
/// dropped (expected, not written) and added (written, not expected).
pub fn same_keys(v: &Value, expected: &[&str]) -> Result<(), String> {
    let found: BTreeSet<String> = key_paths(v).into_iter().collect();
    let want: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
    let dropped: Vec<&String> = want.difference(&found).collect();
    let added: Vec<&String> = found.difference(&want).collect();
    if dropped.is_empty() && added.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the JSON's keys changed: dropped {dropped:?}, added {added:?} (a renamed field is \
         both; a new field goes into the list, an old one keeps its name)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_walked_through_their_first_element_and_nulls_are_leaves() {
        let v = serde_json::json!([{"a": {"b": null}, "c": [[{"d": 1}]], "e": []}, {"x": 1}]);
        assert_eq!(
            key_paths(&v),
            ["[].a", "[].a.b", "[].c", "[].c[][].d", "[].e"]
        );
        assert!(same_keys(&v, &["[].a", "[].a.b", "[].c", "[].c[][].d", "[].e"]).is_ok());
        let e = same_keys(&v, &["[].a", "[].a.bb", "[].c", "[].c[][].d", "[].e"]).unwrap_err();
        assert!(
            e.contains("dropped [\"[].a.bb\"]") && e.contains("added [\"[].a.b\"]"),
            "{e}"
        );
    }
}
