//! The query of `GET /api/v1/findings`: its parameters parsed and validated into a [`FindingFilter`]. A bad
//! value is an error that names the parameter and what it accepts (the handler answers it as a 400 with
//! `{"error": "..."}`). Parameters other than these are ignored, as they always were.
//!
//! - `severity`, `kind`: one value or several, comma-separated or repeated; a finding matching any passes.
//! - `node`, `job`: one name, 1 to [`MAX_NAME_LEN`] bytes.
//! - `active`, `root`: `true` or `false`.
//! - `limit`: a whole number, at least 1.

use crate::analysis::engine::FindingFilter;
use crate::analysis::{FindingKind, Severity};

/// Longest `node` or `job` value accepted, in bytes (the default longest label value the collector takes).
pub const MAX_NAME_LEN: usize = 256;

/// Why a findings query was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    #[error("invalid value {value:?} for parameter `{param}`: expected {expected}")]
    Invalid {
        param: &'static str,
        value: String,
        expected: String,
    },
    #[error("parameter `{0}` given more than once (it takes one value)")]
    Repeated(&'static str),
    #[error("cannot read the query string: {0}")]
    Malformed(String),
}

/// The parameters, by name, as the error messages name them.
const PARAMS: [&str; 7] = ["severity", "kind", "node", "job", "active", "root", "limit"];

/// Parses the query's `(name, value)` pairs (in their order, repeated names allowed) into a filter.
pub fn parse(pairs: &[(String, String)]) -> Result<FindingFilter, QueryError> {
    let mut f = FindingFilter::default();
    let mut seen: Vec<&'static str> = Vec::new();
    for (name, value) in pairs {
        let Some(param) = PARAMS.into_iter().find(|p| p == name) else {
            continue;
        };
        let once = !matches!(param, "severity" | "kind");
        if once && seen.contains(&param) {
            return Err(QueryError::Repeated(param));
        }
        seen.push(param);
        match param {
            "severity" => f
                .severities
                .extend(list(param, value, Severity::parse, severities)?),
            "kind" => f
                .kinds
                .extend(list(param, value, FindingKind::parse, kinds)?),
            "node" => f.node = Some(name_value(param, value)?),
            "job" => f.job = Some(name_value(param, value)?),
            "active" => f.active = Some(boolean(param, value)?),
            "root" => f.root = Some(boolean(param, value)?),
            _ => f.limit = Some(limit(param, value)?),
        }
    }
    f.severities.sort();
    f.severities.dedup();
    f.kinds.sort();
    f.kinds.dedup();
    Ok(f)
}

fn invalid(param: &'static str, value: &str, expected: String) -> QueryError {
    QueryError::Invalid {
        param,
        value: value.to_string(),
        expected,
    }
}

fn severities() -> String {
    let names: Vec<&str> = Severity::ALL.iter().map(|s| s.as_str()).collect();
    format!("one of {} (comma-separated for several)", names.join(", "))
}

fn kinds() -> String {
    let names: Vec<&str> = FindingKind::ALL.iter().map(|k| k.as_str()).collect();
    format!("one of {} (comma-separated for several)", names.join(", "))
}

/// A comma-separated list of values `parse` knows; `expected` describes them for the error.
fn list<T>(
    param: &'static str,
    value: &str,
    parse: fn(&str) -> Option<T>,
    expected: fn() -> String,
) -> Result<Vec<T>, QueryError> {
    value
        .split(',')
        .map(|v| parse(v.trim()).ok_or_else(|| invalid(param, value, expected())))
        .collect()
}

fn name_value(param: &'static str, value: &str) -> Result<String, QueryError> {
    if value.is_empty() || value.len() > MAX_NAME_LEN {
        return Err(invalid(
            param,
            value,
            format!("a name of 1 to {MAX_NAME_LEN} bytes"),
        ));
    }
    Ok(value.to_string())
}

fn boolean(param: &'static str, value: &str) -> Result<bool, QueryError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(param, value, "true or false".into())),
    }
}

fn limit(param: &'static str, value: &str) -> Result<usize, QueryError> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(invalid(param, value, "a whole number of at least 1".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &[(&str, &str)]) -> Result<FindingFilter, QueryError> {
        let pairs: Vec<(String, String)> = s
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        parse(&pairs)
    }

    #[test]
    fn every_filter_is_read() {
        let f = q(&[
            ("severity", "critical,warning"),
            ("kind", "link_errors"),
            ("kind", "straggler"),
            ("node", "node-03"),
            ("job", "team a/run 7"),
            ("active", "true"),
            ("root", "false"),
            ("limit", "5"),
            ("other", "ignored"),
        ])
        .unwrap();
        assert_eq!(
            f,
            FindingFilter {
                active: Some(true),
                node: Some("node-03".into()),
                kinds: vec![FindingKind::LinkErrors, FindingKind::Straggler],
                severities: vec![Severity::Warning, Severity::Critical],
                job: Some("team a/run 7".into()),
                root: Some(false),
                limit: Some(5),
            }
        );
        assert_eq!(q(&[]).unwrap(), FindingFilter::default());
    }

    #[test]
    fn each_bad_value_names_its_parameter_and_what_it_takes() {
        let cases: &[(&str, &str, &str)] = &[
            ("severity", "high", "one of info, warning, critical"),
            ("severity", "", "one of info, warning, critical"),
            (
                "kind",
                "bogus",
                "one of management_network_traffic, link_underutilized",
            ),
            ("kind", "straggler,bogus", "nccl_misconfiguration"),
            ("node", "", "a name of 1 to 256 bytes"),
            ("job", &"j".repeat(257), "a name of 1 to 256 bytes"),
            ("active", "maybe", "true or false"),
            ("root", "yes", "true or false"),
            ("limit", "0", "a whole number of at least 1"),
            ("limit", "-3", "a whole number of at least 1"),
            ("limit", "ten", "a whole number of at least 1"),
        ];
        for (param, value, expected) in cases {
            let e = q(&[(param, value)]).unwrap_err().to_string();
            assert!(
                e.contains(&format!("parameter `{param}`")) && e.contains(expected),
                "{param}={value}: {e}"
            );
        }
        assert_eq!(
            q(&[("node", "a"), ("node", "b")]).unwrap_err(),
            QueryError::Repeated("node")
        );
    }
}
