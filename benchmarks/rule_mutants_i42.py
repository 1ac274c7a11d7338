"""Issue 42's rules, each removed in turn (one string replaced in the source), and the unit test that must then
fail: `python benchmarks/rule_mutants_i42.py` from the project root (the venv's Python); prints CAUGHT or MISSED per
rule and restores every file. Results: benchmarks/results/rule_mutants_i42.txt."""
import pathlib
import subprocess
import sys

R = pathlib.Path(__file__).resolve().parent.parent
M = [  # (rule, file, the rule's text, the text without it, the test that must fail)
    ('count', 'imagebuilder/smoke/judge.py',
     '    if given and seen != given:',
     '    if False:',
     'tests/unit/test_judge.py::test_the_suite_must_see_every_gpu_the_host_gave_it'),
    ('world', 'imagebuilder/smoke/judge.py',
     '    if given and isinstance(world, int) and world != given:',
     '    if False:',
     'tests/unit/test_judge.py::test_the_suite_must_see_every_gpu_the_host_gave_it'),
    ('no-model', 'imagebuilder/smoke/judge.py',
     '    if host.models and not models and (not kinds or "throughput" in kinds):',
     '    if False:',
     'tests/unit/test_judge.py::test_a_report_naming_no_gpu_model_or_driver_is_not_gpu_verified'),
    ('no-driver', 'imagebuilder/smoke/judge.py',
     '    if host.driver and driver != host.driver and (driver or not kinds or "versions" in kinds):',
     '    if host.driver and driver and driver != host.driver:',
     'tests/unit/test_judge.py::test_a_report_naming_no_gpu_model_or_driver_is_not_gpu_verified'),
    ('floor', 'imagebuilder/smoke/floors.py',
     '            elif metric.value < floor.value:',
     '            elif False:',
     'tests/unit/test_judge.py::test_collectives_below_their_floor_fail_and_an_unknown_runner_is_said_not_gated'),
    ('not-gated-note', 'imagebuilder/smoke/floors.py',
     '        if not floors:\n            return [], [',
     '        if not floors:\n            return [], [] if True else [',
     'tests/unit/test_judge.py::test_collectives_below_their_floor_fail_and_an_unknown_runner_is_said_not_gated'),
    ('expected-collectives', 'imagebuilder/smoke/judge.py',
     '"distributed.all_gather", "distributed.reduce_scatter", "distributed.barrier_destroy"',
     '',
     'tests/unit/test_judge.py::test_a_report_that_lacks_an_expected_check_fails_whatever_it_says'),
    ('refusal-count', 'imagebuilder/steps/verify.py',
     '    if count < host.gpus:',
     '    if False:',
     'tests/unit/test_verify.py::test_a_pass_on_fewer_gpus_over_another_link_or_other_nccl_settings_does_not_stand_in'),
    ('refusal-env', 'imagebuilder/steps/verify.py',
     '    if dict(record.gpu.get("env") or {}) != dict(host.env):',
     '    if False:',
     'tests/unit/test_verify.py::test_a_pass_on_fewer_gpus_over_another_link_or_other_nccl_settings_does_not_stand_in'),
    ('runner-from-report', 'imagebuilder/steps/verify.py',
     'return Runner("gpu", tuple(self.host.models), self.host.gpus, self.host.driver, self.host.interconnect)',
     'return Runner("gpu", tuple(passes.gpu_facts(report, True)["models"]), int(report["gpus"]), '
     'self.host.driver, self.host.interconnect)',
     'tests/unit/test_verify.py::test_the_runner_is_the_hosts_never_the_reports'),
    ('semantics', 'imagebuilder/smoke/metrics.py',
     '    unit, better, stat = meaning\n',
     '    unit, better, stat = meaning\n    unit, better, stat = str(doc.get("unit") or unit), '
     'str(doc.get("better") or better), str(doc.get("stat") or stat)\n',
     'tests/unit/test_regression.py::test_a_metrics_meaning_is_the_hosts_not_the_reports'),
    ('line-continues', 'imagebuilder/evidence/history.py',
     '    return [p for p in points if line_key(p.pins) == max(older)] if older else []',
     '    return []',
     'tests/unit/test_regression.py::test_an_upgrade_continues_the_line_of_the_newest_older_version'),
    ('line-own', 'imagebuilder/evidence/history.py',
     '        return [p for p in points if line_key(p.pins) == own]',
     '        return list(points)',
     'tests/unit/test_regression.py::test_versions_side_by_side_keep_a_line_each'),
    ('accept-restart', 'imagebuilder/evidence/regression.py',
     '    usable = usable[accepted[-1]:] if accepted else usable',
     '    usable = usable',
     'tests/unit/test_regression.py::test_an_accepted_regression_is_the_baseline_from_the_next_image_on'),
    ('rules-hash', 'imagebuilder/evidence/passes.py',
     '"rules": rules(),',
     '"rules": "host-judge/1",',
     'tests/unit/test_judge.py::test_the_rules_are_named_by_content'),
    ('gpu-floors-bound', 'imagebuilder/input/matrix.py',
     '            for model, peak in gpus_matching(name):',
     "            for model, peak in [(name, p) for p in "
     "[__import__('imagebuilder.smoke.suite', fromlist=['x']).gpu_peak(name)] if p]:",
     'tests/unit/test_matrix.py::test_bad_values'),
    ('stack-version', 'imagebuilder/supply/torch_stack.py',
     '        elif now[0].version != old.version:',
     '        elif False:',
     'tests/unit/test_torch_stack.py'),
    ('stack-dup', 'imagebuilder/supply/torch_stack.py',
     '        elif len(now) > len(was):',
     '        elif False:',
     'tests/unit/test_torch_stack.py::test_a_layer_that_replaces_downgrades_duplicates_or_removes_fails_naming_both_versions'),
    ('stack-in-stage', 'imagebuilder/steps/stage.py',
     '        if changed:  # removed',
     '        if False:  # removed',
     'tests/unit/test_torch_stack.py::test_stage_fails_the_layer_that_changes_the_torch_stack'),
]
for name, path, old, new, test in M:
    p = R / path
    text = p.read_text()
    assert old in text, (name, old)
    p.write_text(text.replace(old, new, 1))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test], cwd=R,
                           capture_output=True, text=True)
        print(f"{name:22} {'CAUGHT' if r.returncode != 0 else 'MISSED'}  ({test.split('::')[-1]})", flush=True)
    finally:
        p.write_text(text)
