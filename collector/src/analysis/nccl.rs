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
        for cf in &j.conflicts {
            let sev = match cf.kind {
                ConflictKind::ManagementInterface | ConflictKind::IbDisabled => Severity::Critical,
                _ => Severity::Warning,
            };
            let mut subject = Subject::node(&cf.node);
            subject.job = Some(j.id.clone());
            subject.setting = Some(cf.setting.clone());
            let mut c = Candidate::new(FindingKind::NcclMisconfiguration, sev, subject);
            c.summary = format!(
                "Job {} on {}: {}={} — {}",
                j.id,
                cf.node,
                cf.setting,
                cf.value,
                cf.reason.trim_end_matches('.')
            ) + ".";
            let ranks = j.ranks.iter().filter(|r| r.node == cf.node).count();
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
                ),
                ConflictKind::IbDisabled => format!("Remove {}={} so NCCL uses InfiniBand, and restart the job.", cf.setting, cf.value),
                ConflictKind::HcaExcluded => format!("Include every active HCA in {} (or unset it) so each GPU uses its rail.", cf.setting),
                _ => format!("Review {}={} against the node's hardware.", cf.setting, cf.value),
            };
            out.push(c);
        }
    }
    out
}
