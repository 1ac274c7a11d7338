"""Issue 48's rules (the lock is the input of the base images: its coverage, the locked image a run must have, the
rebuild set, unknown never current), each removed in turn (one string replaced in the source), and the unit test
that must then fail: `python benchmarks/rule_mutants_i48.py` from the project root (the venv's Python); prints CAUGHT
or MISSED per rule and restores every file. Results: benchmarks/results/rule_mutants_i48.txt."""
import pathlib
import sys

R = pathlib.Path(__file__).resolve().parent.parent
BASES, T = "imagebuilder/plan/bases.py", "tests/unit/test_lock.py::"
M = [  # (rule, file, the rule's text, the text without it, the test that must fail)
    ('lock-covers-bases', BASES,
     '        if lock.base(name) is None:',
     '        if False:',
     T + 'test_a_matrix_the_lock_does_not_cover_is_refused'),
    ('lock-covers-entries', BASES,
     '        if pinned is None:\n',
     '        if pinned is None:\n            continue\n        if False:\n',
     T + 'test_a_matrix_the_lock_does_not_cover_is_refused'),
    ('locked-image-there', BASES,
     '    if under is None and engine.image_id(base.id) is None:\n        raise',
     '    if False:\n        raise',
     T + 'test_a_locked_image_a_run_cannot_have_is_refused_before_anything_builds'),
    ('locked-digest-pulled', BASES,
     '            raise _missing(base, now, where, f"and cannot be pulled by its locked digest ({exc.message})") '
     'from None',
     '            under = None',
     T + 'test_a_locked_image_a_run_cannot_have_is_refused_before_anything_builds'),
    ('locked-digest-is-the-id', BASES,
     '    if under is not None and under != base.id:',
     '    if False:',
     T + 'test_a_locked_digest_that_is_another_image_is_refused'),
    ('run-resolves-the-lock', BASES,
     '    if plan.locked:\n        if not pull:',
     '    if False:\n        if not pull:',
     T + 'test_a_run_builds_from_the_lock_when_the_tag_moved'),
    ('root-from-the-lock', 'imagebuilder/steps/stage.py',
     'base.id, base.reference',
     'base.id, engine.image_id(base.name) or base.id',
     T + 'test_a_run_builds_from_the_lock_when_the_tag_moved'),
    ('rebuilds-exactly', BASES,
     'if a.key != b.key)',
     ')',
     T + 'test_outdated_names_a_move_and_exactly_the_nodes_it_rebuilds'),
    ('offline-unknown', 'imagebuilder/commands/lock.py',
     '        return UNKNOWN, "--offline: its registry was not asked", None, None',
     '        return CURRENT, "", None, None',
     T + 'test_what_cannot_be_asked_is_unknown_never_current'),
    ('no-answer-unknown', 'imagebuilder/commands/lock.py',
     '        return UNKNOWN, f"its registry did not answer ({exc.message})", None, None',
     '        return CURRENT, "", None, None',
     T + 'test_what_cannot_be_asked_is_unknown_never_current'),
    ('keys-from-the-lock', BASES,
     '    return plan.with_bases(tuple(Base(b.name, b.id, b.digest, Where(',
     '    return plan.with_bases(tuple(Base(b.name, b.digest or b.id, b.digest, Where(',
     T + 'test_a_key_follows_the_lock_not_the_tag'),
]
if __name__ == "__main__":
    sys.path.insert(0, str(R / "benchmarks"))
    from common import remove_rules

    remove_rules(R, M)
