//! `nccl_misconfiguration`: the job's NCCL settings contradict the node's hardware. The agent computes the
//! conflicts (it sees the process environment's allowlisted `NCCL_*` keys and the node's links) and reports
//! them in its job inventory; this rule turns each into a finding. Kinds: `management_interface` and
//! `ib_disabled` (traffic forced off the fabric: critical), `missing_interface`, `hca_excluded` (warning).

use commwatch_model::ConflictKind;

use super::input::AnalysisInput;
use super::{Candidate, Evidence, FindingKind, Severity, Subject};

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for j in &input.jobs {
        for fc in &j.conflicts {
            let cf = &fc.conflict;
            let sev = match cf.kind {
                ConflictKind::ManagementInterface | ConflictKind::IbDisabled => Severity::Critical,
                _ => Severity::Warning,
            };
            let mut subject = Subject::node(&fc.node);
            subject.job = Some(j.id.clone());
            subject.setting = Some(cf.setting.clone());
            let mut c = Candidate::new(FindingKind::NcclMisconfiguration, sev, subject);
            c.summary = format!(
                "Job {} on {}: {}={} — {}",
                j.id,
                fc.node,
                cf.setting,
                cf.value,
                cf.reason.trim_end_matches('.')
            ) + ".";
            let ranks = j.ranks.iter().filter(|r| r.node == fc.node).count();
            c.evidence = Evidence::new(1.0, "conflicts")
                .expected(0.0)
                .detail("setting", cf.setting.clone())
                .detail("value", cf.value.clone())
                .detail("conflict", cf.kind.as_str())
                .detail("ranks_on_node", ranks as u64);
            c.action = match cf.kind {
                ConflictKind::ManagementInterface | ConflictKind::MissingInterface => format!(
                    "Set {} to the node's fabric interface (IPoIB, e.g. ib0) or unset it, and restart the job.",
                    cf.setting
                ).into(),
                ConflictKind::IbDisabled => format!("Remove {}={} so NCCL uses InfiniBand, and restart the job.", cf.setting, cf.value).into(),
                ConflictKind::HcaExcluded => format!("Include every active HCA in {} (or unset it) so each GPU uses its rail.", cf.setting).into(),
                _ => format!("Review {}={} against the node's hardware.", cf.setting, cf.value).into(),
            };
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::input::{ConflictInput, JobInput};
    use commwatch_model::NcclConflict;

    #[test]
    fn the_setting_is_the_subject_not_a_device() {
        let job = JobInput {
            id: "job-42".into(),
            conflicts: vec![ConflictInput {
                node: "node-03".into(),
                conflict: NcclConflict {
                    setting: "NCCL_SOCKET_IFNAME".into(),
                    value: "eth0".into(),
                    kind: ConflictKind::ManagementInterface,
                    reason: "eth0 is a management interface.".into(),
                },
            }],
            ..Default::default()
        };
        let input = AnalysisInput {
            jobs: vec![job],
            ..Default::default()
        };
        let c = &evaluate(&input)[0];
        assert_eq!(c.severity, Severity::Critical);
        assert_eq!(c.subject.setting.as_deref(), Some("NCCL_SOCKET_IFNAME"));
        assert_eq!(c.subject.device, None);
        // The id is the one the finding always had.
        assert_eq!(
            c.id(),
            "nccl_misconfiguration:node-03:NCCL_SOCKET_IFNAME:job=job-42"
        );
        assert_eq!(
            serde_json::to_value(&c.subject).unwrap(),
            serde_json::json!({"node": "node-03", "job": "job-42", "setting": "NCCL_SOCKET_IFNAME"})
        );
        assert_eq!(c.evidence.details["conflict"], "management_interface");
    }
}
