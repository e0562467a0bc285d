//! Step 4, link and algorithm: the link rate the baselines are held against, then what each NCCL log says
//! (version, ranks and nodes, the network across nodes, its interfaces, transports, channels, GPU Direct
//! RDMA) and the settings it echoed.

use std::fmt::Write as _;

use super::super::model::Report;
use super::fabric::{nics_source, rate_source};
use super::markup::{code, esc, file, int, text, unbroken, Align, Table, UNKNOWN};
use super::results::ranks_phrase;
use crate::analysed::LogReport;
use crate::link::LinkInfo;
use crate::nccl_log::NetInterface;

/// The section's body.
pub fn body(r: &Report) -> String {
    let mut o = String::from(
        "<p class=\"lead\">The fabric the baselines are held against, and what NCCL itself reports choosing: \
         the network, the interfaces, the transports and the channels.</p>",
    );
    o.push_str(&fabric_line(&r.link));
    if let Some(w) = &r.link.warning {
        let _ = write!(o, "<p class=\"warning-note\">Collector: {}</p>", esc(w));
    }
    if r.nccl_logs.is_empty() {
        o.push_str(
            "<p class=\"missing\">No NCCL logs given. Run once with <code>NCCL_DEBUG=INFO</code> and pass the \
             log with <code>--nccl-log</code>.</p>",
        );
        return o;
    }
    o.push_str(&facts(&r.nccl_logs));
    o.push_str(&settings(&r.nccl_logs));
    o
}

/// The link rate, the NICs per node and what they make, or what is missing.
fn fabric_line(link: &LinkInfo) -> String {
    let Some(rate) = link.rate_gbps else {
        return "<p class=\"missing\">Link rate unknown: give it with <code>--link-rate</code> (GB/s) or point \
                <code>--collector</code> at a running collector.</p>"
            .to_string();
    };
    let (nics, source) = link.nics();
    let mut o = format!(
        "<p>Link rate <strong>{rate:.1} GB/s</strong> (from {}) · NICs per node <strong>{nics}</strong> ({})",
        esc(rate_source(link.source)),
        esc(nics_source(source))
    );
    if let Some(capacity) = link.capacity_gbps() {
        let _ = write!(
            o,
            " · a node's fabric capacity <strong>{capacity:.1} GB/s</strong>"
        );
    }
    o.push_str(".</p>");
    o
}

fn facts(logs: &[LogReport]) -> String {
    let mut t = Table::new(
        "logs",
        &[
            ("log", Align::Text),
            ("NCCL", Align::Text),
            ("ranks", Align::Text),
            ("network", Align::Text),
            ("interfaces", Align::Text),
            ("transports × connections", Align::Text),
            ("channels", Align::Num),
            ("GPU Direct RDMA", Align::Text),
        ],
    );
    for l in logs {
        let g = &l.log;
        let interfaces = interfaces(&g.interfaces);
        let transports: Vec<String> = g
            .transports
            .iter()
            .map(|(k, v)| format!("{} ×{v}", code(k)))
            .collect();
        let gdr = match g.gdr {
            Some(true) => "<span class=\"good\">enabled</span>".to_string(),
            Some(false) => "<span class=\"bad\">disabled</span>".to_string(),
            None => UNKNOWN.to_string(),
        };
        // The warnings go with the file: a count, and the findings say what they are.
        let warnings = match g.warning_count {
            0 => String::new(),
            1 => "<br><span class=\"bad\">1 NCCL warning</span>".to_string(),
            n => format!("<br><span class=\"bad\">{n} NCCL warnings</span>"),
        };
        t.row(&[
            format!("{}{warnings}", file(&l.file)),
            g.version.as_deref().map_or(UNKNOWN.to_string(), unbroken),
            esc(&ranks_phrase(g.nranks, None, g.nnodes)),
            g.network.as_deref().map_or(UNKNOWN.to_string(), text),
            list(&interfaces),
            list(&transports),
            int(g.channels),
            gdr,
        ]);
    }
    t.finish()
}

/// Each interface once (a log of many ranks names one interface per rank), with its details: the one detail,
/// or the first and how many more, all of them in the tooltip.
fn interfaces(list: &[NetInterface]) -> Vec<String> {
    let mut seen: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for i in list {
        let at = match seen
            .iter()
            .position(|(t, n, _)| *t == i.transport && *n == i.name)
        {
            Some(at) => at,
            None => {
                seen.push((&i.transport, &i.name, Vec::new()));
                seen.len() - 1
            }
        };
        if let Some(d) = i.detail.as_deref() {
            if !seen[at].2.contains(&d) {
                seen[at].2.push(d);
            }
        }
    }
    seen.into_iter()
        .map(|(transport, name, details)| {
            let detail = match details.as_slice() {
                [] => String::new(),
                [one] => format!(" {}", text(one)),
                [first, rest @ ..] => format!(
                    " <span title=\"{}\">{} +{} more</span>",
                    esc(&details.join(" ")),
                    text(first),
                    rest.len()
                ),
            };
            format!("{} {}{detail}", text(transport), code(name))
        })
        .collect()
}

/// Items one per line, or [`UNKNOWN`] for none.
fn list(items: &[String]) -> String {
    if items.is_empty() {
        UNKNOWN.to_string()
    } else {
        items.join("<br>")
    }
}

/// The `NCCL_*` settings each log echoed, when any did.
fn settings(logs: &[LogReport]) -> String {
    let mut t = Table::new(
        "settings",
        &[("log", Align::Text), ("settings", Align::Text)],
    );
    let mut any = false;
    for l in logs.iter().filter(|l| !l.log.settings.is_empty()) {
        any = true;
        let s: Vec<String> = l
            .log
            .settings
            .iter()
            .map(|(k, v)| code(&format!("{k}={v}")))
            .collect();
        t.row(&[file(&l.file), s.join(" ")]);
    }
    if !any {
        return String::new();
    }
    format!("<h3>Settings the logs echo</h3>{}", t.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;
    use crate::report::html::markup::without_labels;

    #[test]
    fn the_link_and_each_logs_facts() {
        let html = without_labels(&body(&fixtures::report()));
        assert!(html.contains(
            "<p>Link rate <strong>50.0 GB/s</strong> (from --link-rate) · NICs per node <strong>1</strong> \
             (assumed: give --nics-per-node) · a node's fabric capacity <strong>50.0 GB/s</strong>.</p>"
        ));
        assert!(html.contains(
            "<td>Socket</td><td>Socket <code>eth0</code> 10.0.0.1&lt;0&gt;</td><td><code>NET/Socket</code> ×7</td>"
        ));
        assert!(html.contains("<span class=\"bad\">disabled</span>"));
        // No settings echoed: no settings table.
        assert!(!html.contains("Settings the logs echo"));
    }

    #[test]
    fn settings_and_unknowns() {
        let mut r = fixtures::report();
        r.nccl_logs[0]
            .log
            .settings
            .insert("NCCL_IB_DISABLE".to_string(), "1".to_string());
        r.nccl_logs[0].log.gdr = None;
        r.link = fixtures::link(None);
        let html = body(&r);
        assert!(html.contains("<code>NCCL_IB_DISABLE=1</code>"));
        assert!(html.contains("Link rate unknown"));
        assert!(!html.contains("disabled</span>"));
    }

    #[test]
    fn each_interface_once() {
        let i = |t: &str, n: &str, d: &str| NetInterface {
            transport: t.to_string(),
            name: n.to_string(),
            detail: Some(d.to_string()),
        };
        let list = [
            i("Socket", "ens3", "10.0.0.1<0>"),
            i("Socket", "ens3", "10.0.0.2<0>"),
            i("Socket", "ens3", "10.0.0.3<0>"),
            i("IB", "mlx5_0:1", "RoCE"),
            i("IB", "mlx5_0:1", "RoCE"),
        ];
        assert_eq!(
            interfaces(&list),
            [
                "Socket <code>ens3</code> <span title=\"10.0.0.1&lt;0&gt; 10.0.0.2&lt;0&gt; 10.0.0.3&lt;0&gt;\">\
                 10.0.0.1&lt;0&gt; +2 more</span>",
                "IB <code>mlx5_0:1</code> RoCE",
            ]
        );
    }

    #[test]
    fn no_logs_say_how_to_get_one() {
        let mut r = fixtures::report();
        r.nccl_logs.clear();
        assert!(body(&r).contains("<code>NCCL_DEBUG=INFO</code>"));
    }
}
