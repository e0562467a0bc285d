//! The test-only text reader ([`super::parse`]): names, labels, escapes, values, bad lines, the name filter.

use super::parse::parse_exposition;

#[test]
fn reads_names_labels_values_and_escapes() {
    let text = "# HELP a_total A counter.\n# TYPE a_total counter\na_total 3\n\
                b{node=\"n1\",device=\"mlx5_0\"} 1.5e9\n\
                c{v=\"a\\\\b\\\"c\\nd ü\",} NaN\n\
                d_bucket{le=\"+Inf\"} +Inf\n  e -inf 1712345678000\n";
    let (samples, errors) = parse_exposition(text, |_| true);
    assert_eq!(errors, []);
    assert_eq!(samples.len(), 5);
    assert_eq!(samples[0].name, "a_total");
    assert_eq!(samples[0].value, 3.0);
    assert!(samples[0].labels.is_empty());
    assert_eq!(
        samples[1].labels,
        [
            ("node".into(), "n1".into()),
            ("device".into(), "mlx5_0".into())
        ]
    );
    assert_eq!(samples[1].value, 1.5e9);
    assert_eq!(samples[2].labels, [("v".into(), "a\\b\"c\nd ü".into())]);
    assert!(samples[2].value.is_nan());
    assert_eq!(samples[3].value, f64::INFINITY);
    assert_eq!(samples[4].value, f64::NEG_INFINITY);
}

#[test]
fn bad_lines_are_skipped_and_named_the_rest_kept() {
    let text =
        "ok 1\n9bad 1\nnovalue\nx{a=\"1\" 2\nx{a=1} 2\nx{a=\"\\q\"} 2\nx{-a=\"1\"} 2\nx 1e\nok 2\n";
    let (samples, errors) = parse_exposition(text, |_| true);
    assert_eq!(samples.len(), 2);
    let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7, 8]);
    assert!(errors[0].to_string().contains("line 2"), "{}", errors[0]);
}

#[test]
fn keep_filters_by_name_before_labels_are_read() {
    let (samples, errors) =
        parse_exposition("a_x{broken 1\nb_y{l=\"v\"} 2\n", |n| n.starts_with("b_"));
    assert_eq!(errors, []);
    assert_eq!(samples.len(), 1);
    assert_eq!(samples[0].name, "b_y");
}
