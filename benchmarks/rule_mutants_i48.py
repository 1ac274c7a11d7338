"""Issue 48's rules (the lock is the input of the base images: its coverage, the locked image a run must have, the
rebuild set, unknown never current; and of the wheelhouses: each file's bytes, the keys, what the run serves, what
plain `lock` leaves alone, what `outdated` reads), each removed in turn (one string replaced in the source), and the
unit test that must then fail: `python benchmarks/rule_mutants_i48.py` from the project root (the venv's Python);
prints CAUGHT or MISSED per rule and restores every file. Results: benchmarks/results/rule_mutants_i48.txt."""
import pathlib
import sys

R = pathlib.Path(__file__).resolve().parent.parent
BASES, WHEELS, T = "imagebuilder/plan/bases.py", "imagebuilder/plan/wheels.py", "tests/unit/test_lock.py::"
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
    # the wheelhouses (lock version 2)
    ('wheel-bytes-pinned', WHEELS,
     '        if found != pin:',
     '        if False:',
     T + 'test_a_wheelhouse_file_the_lock_does_not_pin_as_it_is_stops_everything_naming_file_and_hashes'),
    ('wheel-gone-refused', WHEELS,
     '        if wheel not in here:',
     '        if False:',
     T + 'test_a_wheelhouse_file_the_lock_does_not_pin_as_it_is_stops_everything_naming_file_and_hashes'),
    ('wheel-new-refused', WHEELS,
     '        if wheel not in known:',
     '        if False:',
     T + 'test_a_wheelhouse_file_the_lock_does_not_pin_as_it_is_stops_everything_naming_file_and_hashes'),
    ('entry-wheelhouse-covered', WHEELS,
     '        if given.wheelhouse != want:\n            said',
     '        if False:\n            said',
     T + 'test_a_version_1_lock_still_reads_and_a_wheelhouse_it_does_not_pin_is_refused_but_not_watched'),
    ('keys-name-the-pins', 'imagebuilder/plan/keys.py',
     '            if (locked := self.pinned.get(folder)) is not None:',
     '            if (locked := self.pinned.get(folder)) is not None and False:',
     T + 'test_lock_keeps_a_pinned_file_until_update_names_it_and_exactly_the_wheelhouse_nodes_rebuild'),
    ('server-serves-the-pins', 'imagebuilder/run/loopback.py',
     '        pins = self.pins.get(str(folder))',
     '        pins = None',
     T + 'test_a_locked_wheelhouse_serves_only_its_pinned_files_each_with_its_hash_for_pip'),
    ('plain-lock-takes-nothing', 'imagebuilder/commands/lock.py',
     '    files = {file: pin for file, pin in kept.items() if file not in wanted or file in here}',
     '    files = {file: pin for file, pin in kept.items() if file in here}\n    wanted = wanted | here',
     T + 'test_lock_keeps_a_pinned_file_until_update_names_it_and_exactly_the_wheelhouse_nodes_rebuild'),
    ('outdated-reads-the-files', 'imagebuilder/commands/lock.py',
     'wheels.file_hash(house.folder / file) if file in here else None, takers))',
     'pins.get(file), takers))',
     T + 'test_outdated_names_each_moved_wheelhouse_file_and_the_nodes_it_rebuilds_where_build_refuses'),
    ('plan-keys-without-engine', 'imagebuilder/commands/plan.py',
     '    if plan.locked:\n        plan = bases.keyed(plan)',
     '    if False:\n        plan = bases.keyed(plan)',
     T + 'test_plan_without_an_engine_keys_a_locked_wheelhouse_as_a_run_does'),
]
if __name__ == "__main__":
    sys.path.insert(0, str(R / "benchmarks"))
    from common import remove_rules

    remove_rules(R, M)
