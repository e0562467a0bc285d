"""Unit tests of scripts/modcycles.py's reading of Rust source.

python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modcycles  # noqa: E402


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


class StripTests(unittest.TestCase):
    def test_a_string_continued_over_lines_hides_nothing_after_it(self):
        text = 'fn f() {\n    println!("a \\\n        b {}", 1);\n}\nuse crate::late::x;\n'
        self.assertIn("crate::late::x", modcycles.strip_tests_and_comments(text))

    def test_a_quote_character_literal_does_not_open_a_string(self):
        text = "fn f(c: char) -> bool { c == '\"' }\nuse crate::late::x;\nfn g() -> &'static str { \"s\" }\n"
        self.assertIn("crate::late::x", modcycles.strip_tests_and_comments(text))

    def test_a_comment_marker_inside_a_string_is_text(self):
        text = 'const U: &str = "http://host/";\nuse crate::late::x;\n'
        self.assertIn("crate::late::x", modcycles.strip_tests_and_comments(text))

    def test_paths_in_comments_strings_and_raw_strings_are_not_references(self):
        text = (
            "// crate::a::b\n/* crate::c::d */\n"
            'const S: &str = "crate::e::f";\nconst R: &str = r#"crate::g::h "quoted""#;\n'
        )
        self.assertEqual(modcycles.referenced_paths(modcycles.strip_tests_and_comments(text)), [])

    def test_everything_from_a_cfg_test_item_on_is_dropped(self):
        text = "use crate::a;\n#[cfg(test)]\nmod tests { use crate::b; }\n"
        paths = modcycles.referenced_paths(modcycles.strip_tests_and_comments(text))
        self.assertEqual(set(paths), {"crate::a"})


class StageTests(unittest.TestCase):
    def test_a_reference_hidden_behind_a_continued_string_is_a_stage_violation(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "src/lib.rs", "pub mod store;\npub mod analysis;\n")
            write(root, "src/analysis.rs", "pub fn f() {}\n")
            write(
                root,
                "src/store/mod.rs",
                'fn g() {\n    println!("x \\\n        y");\n    crate::analysis::f();\n}\n',
            )
            _, edges = modcycles.crate_graph(root)
            violations = modcycles.layer_violations("collector", edges)
            self.assertEqual(len(violations), 1, violations)
            self.assertIn("store -> analysis", violations[0])


if __name__ == "__main__":
    unittest.main()
