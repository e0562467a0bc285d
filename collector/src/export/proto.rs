//! Small builders for the `prometheus::proto` values the scrape-time collectors assemble.

use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// One label pair.
pub(crate) fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

/// An empty family with its name, help and type.
pub(crate) fn family(name: &str, help: &str, kind: MetricType) -> MetricFamily {
    let mut mf = MetricFamily::default();
    mf.set_name(name.to_string());
    mf.set_help(help.to_string());
    mf.set_field_type(kind);
    mf
}

/// One sample: a counter value for a `COUNTER` family, a gauge value otherwise.
pub(crate) fn metric(kind: MetricType, labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut m = Metric::default();
    m.set_label(labels);
    if kind == MetricType::COUNTER {
        let mut c = Counter::default();
        c.set_value(value);
        m.set_counter(c);
    } else {
        let mut g = Gauge::default();
        g.set_value(value);
        m.set_gauge(g);
    }
    m
}
