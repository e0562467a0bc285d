//! A node's job list: bounded counts and lengths, `NCCL_*` setting names only (a secret in the environment must
//! never reach the store or a log), conflict kinds typed.

use commwatch_model::text::escape_controls_owned as escaped;
use commwatch_model::{ConflictKind, Job, NcclConflict, Rank};
use commwatch_proto::v1 as pb;

use super::IngestError;
use crate::config::Limits;
use crate::store::JobList;

/// Most jobs one node's job list may hold.
pub const MAX_JOBS_PER_NODE: usize = 64;
/// Most ranks one node's job list may hold, over all its jobs.
pub const MAX_RANKS_PER_NODE: usize = 1_024;
/// Most GPUs one rank may list.
pub const MAX_GPUS_PER_RANK: usize = 64;
/// Most NCCL settings one rank may carry.
pub const MAX_NCCL_SETTINGS_PER_RANK: usize = 128;
/// Most conflicts one job may carry on one node.
pub const MAX_CONFLICTS_PER_JOB: usize = 64;
/// Longest job id, in bytes (the proto's bound; [`Limits::max_label_len`] applies too).
pub const MAX_JOB_ID_LEN: usize = 128;
/// Longest NCCL setting name, in bytes (as the agent's allowlist enforces).
pub const MAX_NCCL_KEY_LEN: usize = 64;

fn nccl_key_ok(k: &str) -> bool {
    k.len() > "NCCL_".len()
        && k.len() <= MAX_NCCL_KEY_LEN
        && k.starts_with("NCCL_")
        && k.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn count_ok(field: String, n: usize, max: usize) -> Result<(), IngestError> {
    if n > max {
        Err(IngestError::invalid(
            field,
            format!("{n} entries, at most {max} allowed"),
        ))
    } else {
        Ok(())
    }
}

fn no_control(field: impl Fn() -> String, s: &str) -> Result<(), IngestError> {
    if s.chars().any(char::is_control) {
        Err(IngestError::invalid(field(), "contains control characters"))
    } else {
        Ok(())
    }
}

/// A node's complete job list (`InventoryUpdate.jobs`), converted and validated: at most [`MAX_JOBS_PER_NODE`]
/// jobs with distinct ids, [`MAX_RANKS_PER_NODE`] ranks in all, bounded GPUs, settings and conflicts, setting
/// names of the form `NCCL_[A-Z0-9_]+`, a non-empty conflict kind (an unknown one is kept as it came). Every
/// failure is `INVALID_ARGUMENT`: a job list is replaced as a whole, so a bad one is malformed input, not a
/// partial update.
impl TryFrom<pb::JobInventory> for JobList {
    type Error = IngestError;

    fn try_from(inv: pb::JobInventory) -> Result<Self, Self::Error> {
        count_ok("jobs".into(), inv.jobs.len(), MAX_JOBS_PER_NODE)?;
        let total_ranks: usize = inv.jobs.iter().map(|j| j.ranks.len()).sum();
        count_ok("jobs[].ranks".into(), total_ranks, MAX_RANKS_PER_NODE)?;
        let mut jobs: Vec<Job> = Vec::with_capacity(inv.jobs.len());
        for (ji, j) in inv.jobs.into_iter().enumerate() {
            if j.id.is_empty() || j.id.len() > MAX_JOB_ID_LEN {
                return Err(IngestError::invalid(
                    format!("jobs[{ji}].id"),
                    format!("{} bytes, 1..={MAX_JOB_ID_LEN} allowed", j.id.len()),
                ));
            }
            no_control(|| format!("jobs[{ji}].id"), &j.id)?;
            if jobs.iter().any(|x| x.id == j.id) {
                return Err(IngestError::invalid(
                    format!("jobs[{ji}].id"),
                    "the same job id twice in one job list",
                ));
            }
            count_ok(
                format!("jobs[{ji}].conflicts"),
                j.conflicts.len(),
                MAX_CONFLICTS_PER_JOB,
            )?;
            let mut ranks = Vec::with_capacity(j.ranks.len());
            for (ri, r) in j.ranks.into_iter().enumerate() {
                let f = |n: &str| format!("jobs[{ji}].ranks[{ri}].{n}");
                count_ok(f("gpus"), r.gpus.len(), MAX_GPUS_PER_RANK)?;
                count_ok(f("nccl"), r.nccl.len(), MAX_NCCL_SETTINGS_PER_RANK)?;
                if let Some(k) = r.nccl.keys().find(|k| !nccl_key_ok(k)) {
                    // The key is not echoed: only `NCCL_*` names may ever be stored or logged.
                    return Err(IngestError::invalid(
                        f("nccl"),
                        format!("a key of {} bytes is not an NCCL_* setting name", k.len()),
                    ));
                }
                let opt = |s: String| (!s.is_empty()).then(|| escaped(s));
                // Values are stored with their control characters escaped (`commwatch_model::text`).
                ranks.push(Rank {
                    pid: r.pid,
                    rank: r.rank,
                    local_rank: r.local_rank,
                    world_size: r.world_size,
                    gpus: r.gpus.into_iter().map(escaped).collect(),
                    pod_uid: opt(r.pod_uid),
                    container_id: opt(r.container_id),
                    nccl: r.nccl.into_iter().map(|(k, v)| (k, escaped(v))).collect(),
                    found_by: escaped(r.found_by),
                });
            }
            let mut conflicts = Vec::with_capacity(j.conflicts.len());
            for (ci, c) in j.conflicts.into_iter().enumerate() {
                if !nccl_key_ok(&c.setting) {
                    return Err(IngestError::invalid(
                        format!("jobs[{ji}].conflicts[{ci}].setting"),
                        "not an NCCL_* setting name",
                    ));
                }
                if c.kind.is_empty() {
                    return Err(IngestError::invalid(
                        format!("jobs[{ji}].conflicts[{ci}].kind"),
                        "empty",
                    ));
                }
                no_control(|| format!("jobs[{ji}].conflicts[{ci}].kind"), &c.kind)?;
                conflicts.push(NcclConflict {
                    kind: ConflictKind::parse(&c.kind),
                    setting: c.setting,
                    value: escaped(c.value),
                    reason: escaped(c.reason),
                });
            }
            jobs.push(Job {
                id: j.id,
                ranks,
                conflicts,
            });
        }
        Ok(JobList { jobs })
    }
}

// The limits are checked at the edge, beside the conversion: the store trusts what it is given.
impl JobList {
    /// Converts and checks a received (or persisted) job list: [`TryFrom`] and then [`JobList::check_limits`].
    pub fn validated(inv: pb::JobInventory, limits: &Limits) -> Result<JobList, IngestError> {
        let l = JobList::try_from(inv)?;
        l.check_limits(limits)?;
        Ok(l)
    }

    /// Checks every string against [`Limits::max_label_len`] (job ids, GPUs, pod and container ids, setting
    /// values, conflict fields; `found_by` and conflict reasons too). A failure is `INVALID_ARGUMENT`.
    pub fn check_limits(&self, limits: &Limits) -> Result<(), IngestError> {
        let max = limits.max_label_len;
        let check = |field: &dyn Fn() -> String, s: &str| -> Result<(), IngestError> {
            if s.len() > max {
                Err(IngestError::invalid(
                    field(),
                    format!("{} bytes, limit {max}", s.len()),
                ))
            } else {
                Ok(())
            }
        };
        for (ji, j) in self.jobs.iter().enumerate() {
            check(&|| format!("jobs[{ji}].id"), &j.id)?;
            for (ri, r) in j.ranks.iter().enumerate() {
                let f = |n: &'static str| move || format!("jobs[{ji}].ranks[{ri}].{n}");
                for g in &r.gpus {
                    check(&f("gpus"), g)?;
                }
                check(&f("pod_uid"), r.pod_uid.as_deref().unwrap_or(""))?;
                check(&f("container_id"), r.container_id.as_deref().unwrap_or(""))?;
                check(&f("found_by"), &r.found_by)?;
                for v in r.nccl.values() {
                    check(&f("nccl"), v)?;
                }
            }
            for (ci, c) in j.conflicts.iter().enumerate() {
                let f = |n: &'static str| move || format!("jobs[{ji}].conflicts[{ci}].{n}");
                check(&f("value"), &c.value)?;
                check(&f("kind"), c.kind.as_str())?;
                // A sentence: allowed four labels' worth.
                if c.reason.len() > 4 * max {
                    return Err(IngestError::invalid(
                        f("reason")(),
                        format!("{} bytes, limit {}", c.reason.len(), 4 * max),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(pid: u32, nccl: &[(&str, &str)]) -> pb::Rank {
        pb::Rank {
            pid,
            rank: Some(pid),
            local_rank: Some(0),
            world_size: Some(16),
            gpus: vec!["0".into()],
            pod_uid: String::new(),
            container_id: String::new(),
            nccl: nccl
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            found_by: "environment".into(),
        }
    }

    fn job(id: &str, ranks: Vec<pb::Rank>) -> pb::Job {
        pb::Job {
            id: id.into(),
            ranks,
            conflicts: vec![pb::NcclConflict {
                setting: "NCCL_SOCKET_IFNAME".into(),
                value: "eth0".into(),
                kind: "management_interface".into(),
                reason: "eth0 is a management interface.".into(),
            }],
        }
    }

    fn inv(jobs: Vec<pb::Job>) -> pb::JobInventory {
        pb::JobInventory { jobs }
    }

    fn is_invalid(r: Result<JobList, IngestError>) -> bool {
        matches!(r, Err(ref e @ IngestError::Invalid { .. }) if e.to_status().code() == tonic::Code::InvalidArgument)
    }

    /// NCCL values, GPU and container strings and conflict values and reasons are stored with their terminal
    /// escapes shown as `\u001b`, not interpreted (issue 34).
    #[test]
    fn control_characters_in_values_are_stored_escaped() {
        let mut r = rank(1, &[("NCCL_SOCKET_IFNAME", "eth0\x1b]0;owned\x07")]);
        r.gpus = vec!["0\x1b[2J".into()];
        r.container_id = "c\r".into();
        r.pod_uid = "p\u{9b}".into();
        r.found_by = "env\x07".into();
        let mut j = job("j1", vec![r]);
        j.conflicts[0].value = "eth0\x1b[2J".into();
        j.conflicts[0].reason = "bad\x1b]8;;http://evil.example\x1b\\here".into();
        let l = JobList::try_from(inv(vec![j])).expect("accepted, escaped");
        let r = &l.jobs[0].ranks[0];
        assert_eq!(r.nccl["NCCL_SOCKET_IFNAME"], "eth0\\u001b]0;owned\\u0007");
        assert_eq!(r.gpus, vec!["0\\u001b[2J".to_string()]);
        assert_eq!(r.container_id.as_deref(), Some("c\\u000d"));
        assert_eq!(r.pod_uid.as_deref(), Some("p\\u009b"));
        assert_eq!(r.found_by, "env\\u0007");
        let c = &l.jobs[0].conflicts[0];
        assert_eq!(c.value, "eth0\\u001b[2J");
        assert_eq!(c.reason, "bad\\u001b]8;;http://evil.example\\u001b\\here");
    }

    #[test]
    fn converts_a_job_list() {
        let l = JobList::try_from(inv(vec![job(
            "4242",
            vec![rank(7, &[("NCCL_SOCKET_IFNAME", "eth0")])],
        )]))
        .expect("valid");
        assert_eq!(l.jobs.len(), 1);
        let r = &l.jobs[0].ranks[0];
        assert_eq!((r.pid, r.rank, r.world_size), (7, Some(7), Some(16)));
        assert_eq!(r.pod_uid, None);
        assert_eq!(
            r.nccl.get("NCCL_SOCKET_IFNAME").map(String::as_str),
            Some("eth0")
        );
        assert_eq!(
            l.jobs[0].conflicts[0].kind,
            ConflictKind::ManagementInterface
        );
        assert!(l.check_limits(&Limits::default()).is_ok());
        assert_eq!(
            JobList::try_from(inv(vec![])).expect("empty"),
            JobList::default()
        );
    }

    #[test]
    fn malformed_job_lists_are_invalid() {
        assert!(is_invalid(JobList::try_from(inv(vec![job("", vec![])]))));
        assert!(is_invalid(JobList::try_from(inv(vec![job(
            &"x".repeat(129),
            vec![]
        )]))));
        assert!(is_invalid(JobList::try_from(inv(vec![job(
            "a\nb",
            vec![]
        )]))));
        assert!(is_invalid(JobList::try_from(inv(vec![
            job("a", vec![]),
            job("a", vec![])
        ]))));
        // A key outside NCCL_* (what a secret would look like) is refused, and not echoed in the error.
        let bad = JobList::try_from(inv(vec![job(
            "a",
            vec![rank(1, &[("AWS_SECRET_ACCESS_KEY", "hunter2")])],
        )]));
        assert!(is_invalid(bad.clone()));
        let msg = bad.expect_err("invalid").to_string();
        assert!(!msg.contains("AWS") && !msg.contains("hunter2"), "{msg}");
        assert!(is_invalid(JobList::try_from(inv(vec![job(
            "a",
            vec![rank(1, &[("nccl_lower", "x")])]
        )]))));
        let mut c = job("a", vec![]);
        c.conflicts[0].setting = "PATH".into();
        assert!(is_invalid(JobList::try_from(inv(vec![c]))));
        let mut c = job("a", vec![]);
        c.conflicts[0].kind = String::new();
        assert!(is_invalid(JobList::try_from(inv(vec![c]))));
    }

    #[test]
    fn counts_are_bounded() {
        let many: Vec<pb::Job> = (0..=MAX_JOBS_PER_NODE)
            .map(|i| job(&i.to_string(), vec![]))
            .collect();
        assert!(is_invalid(JobList::try_from(inv(many))));
        let ranks: Vec<pb::Rank> = (0..=MAX_RANKS_PER_NODE as u32)
            .map(|p| rank(p, &[]))
            .collect();
        assert!(is_invalid(JobList::try_from(inv(vec![job("a", ranks)]))));
        let mut r = rank(1, &[]);
        r.gpus = (0..=MAX_GPUS_PER_RANK).map(|g| g.to_string()).collect();
        assert!(is_invalid(JobList::try_from(inv(vec![job("a", vec![r])]))));
        let mut r = rank(1, &[]);
        r.nccl = (0..=MAX_NCCL_SETTINGS_PER_RANK)
            .map(|i| (format!("NCCL_X{i}"), "1".to_string()))
            .collect();
        assert!(is_invalid(JobList::try_from(inv(vec![job("a", vec![r])]))));
        let mut j = job("a", vec![]);
        j.conflicts = vec![j.conflicts[0].clone(); MAX_CONFLICTS_PER_JOB + 1];
        assert!(is_invalid(JobList::try_from(inv(vec![j]))));
    }

    #[test]
    fn lengths_follow_max_label_len() {
        let limits = Limits {
            max_label_len: 12,
            ..Limits::default()
        };
        let ok = JobList::try_from(inv(vec![job("42", vec![rank(1, &[("NCCL_NET", "IB")])])]))
            .expect("valid");
        let mut ok = ok;
        ok.jobs[0].conflicts.clear();
        assert!(ok.check_limits(&limits).is_ok());
        let mut long = ok.clone();
        long.jobs[0].ranks[0]
            .nccl
            .insert("NCCL_IB_HCA".into(), "mlx5_0,mlx5_1".into());
        let e = long.check_limits(&limits).expect_err("too long");
        assert_eq!(e.to_status().code(), tonic::Code::InvalidArgument);
        let mut long = ok.clone();
        long.jobs[0].id = "1234567890123".into();
        assert!(long.check_limits(&limits).is_err());
        let mut long = ok;
        long.jobs[0].ranks[0].pod_uid = Some("x".repeat(13));
        assert!(long.check_limits(&limits).is_err());
    }
}
