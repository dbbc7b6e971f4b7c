"""scripts/ctest_leaves_no_files.sh fails, naming the file, when a test leaves one in TMPDIR,
passes when none does, keeps ctest's own failure, and removes its folder either way.

Usage: ctest_leaves_no_files_test.py SCRIPT
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None

TESTS = """
add_test(leaves_a_file sh -c "mkdir \\"$TMPDIR/made-by-a-test\\" && touch \\"$TMPDIR/made-by-a-test/x\\"")
add_test(cleans_up sh -c "touch \\"$TMPDIR/y\\" && rm \\"$TMPDIR/y\\"")
add_test(fails sh -c "exit 3")
"""


class CtestLeavesNoFiles(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory(prefix="xf-ctest-check-")
        self.build = os.path.join(self.work.name, "build")
        os.mkdir(self.build)
        with open(os.path.join(self.build, "CTestTestfile.cmake"), "w") as f:
            f.write(TESTS)
        # The script's own folder goes here, so the test can see that it is removed.
        self.tmp = os.path.join(self.work.name, "tmp")
        os.mkdir(self.tmp)

    def tearDown(self):
        self.work.cleanup()

    def run_script(self, *ctest_args):
        env = dict(os.environ, TMPDIR=self.tmp)
        return subprocess.run([SCRIPT, self.build, *ctest_args], env=env, capture_output=True,
                              text=True, timeout=120)

    def test_a_left_file_fails_the_run_and_is_named(self):
        r = self.run_script("-R", "leaves_a_file")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("the tests left these in TMPDIR", r.stderr)
        self.assertIn("./made-by-a-test", r.stderr)
        self.assertEqual(os.listdir(self.tmp), [])  # removed all the same

    def test_a_clean_run_passes(self):
        r = self.run_script("-R", "cleans_up")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_ctest_failure_is_kept(self):
        r = self.run_script("-R", "fails")
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn("left these", r.stderr)
        self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    SCRIPT = sys.argv.pop(1)
    unittest.main()
