"""Every printed value is quoted for the place it lands in (`quoting`), once, in the renderer: a template
author never has to remember it, and a value that cannot be placed inertly is an input error."""

from __future__ import annotations

import shlex
import subprocess

import jinja2
import pytest
from markupsafe import Markup

from imagebuilder.plan.quoting import Marks, Place, Unquotable, place, places, quote_word

HOSTILE = "x; touch /tmp/pwned $(touch /tmp/pwned) `touch /tmp/pwned` && echo {a,b} # c"


def render(source: str, **values: object) -> str:
    """`source` rendered; one without a FROM of its own stands after `FROM base` (not returned)."""
    marks = Marks()
    env = jinja2.Environment(autoescape=True, finalize=marks.finalize, undefined=jinja2.StrictUndefined)
    env.filters.update(join=marks.join, shquote=marks.shquote, tojson=marks.tojson)
    marks.begin()
    head = "" if "FROM" in source else "FROM base\n"
    return marks.resolve(head + env.from_string(source).render(**values))[len(head):]


@pytest.mark.parametrize(("line", "want"), [
    ("RUN echo {{ v }}", Place.WORD),
    ("RUN echo '{{ v }}'", Place.SINGLE),
    ('RUN echo "{{ v }}"', Place.DOUBLE),
    ("RUN python3 -c 'print(\"{{ v }}\")'", Place.SINGLE),  # a " inside '...' is literal
    ('RUN echo "it\'s" {{ v }}', Place.WORD),  # a ' inside "..." is literal
    ("RUN echo a\\'{{ v }}", Place.WORD),  # an escaped quote opens nothing
    ("RUN echo ok # {{ v }}", Place.COMMENT),
    ("RUN echo a#{{ v }}", Place.WORD),  # `#` inside a word is no comment
    ("# {{ v }}", Place.COMMENT),
    ('CMD ["echo", "{{ v }}"]', Place.JSON_STRING),
    ("CMD [{{ v }}]", Place.JSON),
    ("ENV A={{ v }}", Place.WORD),
    ("ENV A=x # {{ v }}", Place.WORD),  # Docker's own parser: no comments inside ENV
    ("LABEL a=\"{{ v }}\"", Place.DOUBLE),
    ("{{ v }} echo", Place.WORD),
])
def test_each_place_is_found(line: str, want: Place) -> None:
    marks = Marks()
    text = "FROM base\n" + line.replace("{{ v }}", str(marks.mark("v")))
    assert [where for where, _ in places(text).values()] == [want]


@pytest.mark.parametrize("source", ["# {{ v }}\nFROM base", "ARG X={{ v }}\nFROM base", "\n# a\n#{{ v }}\nFROM base",
                                    "{{ v }}\nFROM base"])
def test_nothing_is_printed_before_the_first_from(source: str) -> None:
    """A comment before the first FROM can be a parser directive: `escape=` changes how every later line is read,
    `syntax=` makes BuildKit run another frontend image. No value stands there, not even a harmless one."""
    marks = Marks()
    text = source.replace("{{ v }}", str(marks.mark("v")))
    assert [where for where, _ in places(text).values()] == [Place.PREAMBLE]
    with pytest.raises(Unquotable, match="parser directive"):
        render(source, v="escape=`")
    with pytest.raises(Unquotable, match="parser directive"):
        render(source, v="plain words")
    assert render("FROM base\n" + source.replace("\nFROM base", ""), v="plain") .startswith("FROM base")


@pytest.mark.parametrize("value", ["a\\", "ends in a backslash \\  ", "x\\ "])
@pytest.mark.parametrize("source", ["FROM base\nRUN true  # {{ v }}\nENV SWALLOWED=1", "FROM base\n# {{ v }}\nENV B=1"])
def test_a_comment_cannot_swallow_the_next_line(source: str, value: str) -> None:
    """Docker joins a line that ends in a backslash to the next: a value ending a comment that way would make
    the next instruction (here an ENV) part of the comment, and the build would still succeed without it."""
    with pytest.raises(Unquotable, match="ends in a backslash"):
        render(source, v=value)
    assert render(source, v="a \\ in the middle").count("\n") == 2


def test_continued_lines_keep_their_quotes_and_comment_lines_inside_are_dropped() -> None:
    marks = Marks()
    m = [str(marks.mark(i)) for i in range(4)]
    text = (f"FROM base\nRUN echo '{m[0]} \\\n"
            f"   still quoted' {m[1]} \\\n"
            f"# a comment line inside the instruction {m[2]}\n"
            f"   && echo {m[3]}\n")
    assert [w for w, _ in places(text).values()] == [Place.SINGLE, Place.WORD, Place.COMMENT, Place.WORD]
    assert [line for _, line in places(text).values()] == [2, 3, 4, 5]


def test_a_shell_comment_runs_to_the_end_of_the_joined_instruction() -> None:
    marks = Marks()
    text = f"FROM base\nRUN echo a # note \\\n && echo {marks.mark('v')}\nRUN echo {marks.mark('w')}\n"
    assert [w for w, _ in places(text).values()] == [Place.COMMENT, Place.WORD]


@pytest.mark.parametrize("value", [HOSTILE, "it's", 'say "hi"', "pkg[extra]>=1,<2", "a\tb"[:1], "", "plain-1.0"])
def test_a_word_reads_back_as_exactly_the_value_in_a_shell(value: str) -> None:
    text = render("echo {{ v }}", v=value) if value else "echo"
    out = subprocess.run(["bash", "-c", text.replace("echo", "printf %s", 1)], capture_output=True, text=True)
    assert out.stdout == value and out.returncode == 0


def test_safe_values_are_written_as_they_are() -> None:
    assert render("RUN apt-get install {{ p | join(' ') }}", p=["git", "g++", "libc6:amd64", "curl=7.88"]) \
        == "RUN apt-get install git g++ libc6:amd64 curl=7.88"
    ref = "127.0.0.1:5000/ml/pytorch:2.13.0-base"
    assert render("FROM {{ v }}", v=ref) == f"FROM {ref}"


def test_join_quotes_each_item_and_concatenation_quotes_the_whole() -> None:
    assert render("RUN pip install {{ r | join(' ') }}", r=["a>=1", "b"]) == "RUN pip install 'a>=1' b"
    assert render("RUN pip install {{ 'torch==' ~ v }}", v="1; id") == "RUN pip install 'torch==1; id'"
    assert render("RUN pip install {{ r | map('shquote') | join(' ') }}", r=["a>=1"]) == "RUN pip install 'a>=1'"


def test_markup_and_macro_output_pass_as_they_are() -> None:
    source = '{% macro m(x) %}RUN a && b {{ x }} > f{% endmacro %}{{ m(v) }} {{ arg }}'
    assert render(source, v="1;2", arg=Markup('"${ARG}"')) == "RUN a && b '1;2' > f \"${ARG}\""


@pytest.mark.parametrize(("line", "value", "why"), [
    ("RUN echo '{{ v }}'", "it's", "' that would end the string"),
    ('RUN echo "{{ v }}"', "$(id)", "$"),
    ('RUN echo "{{ v }}"', 'a"b', '"'),
    ('RUN echo "{{ v }}"', "a`id`", "`"),
    ("RUN echo {{ v }}", "a\nRUN touch /tmp/pwned", "newline"),
    ("# {{ v }}", "a\nRUN touch /tmp/pwned", "newline"),
    ('RUN ["sh", "-c", "echo {{ v }}"]', "a; touch /tmp/pwned", "JSON-form"),
])
def test_a_value_that_cannot_be_placed_inertly_is_refused(line: str, value: str, why: str) -> None:
    with pytest.raises(Unquotable) as info:
        render(line, v=value)
    assert why in str(info.value) and "rendered line 2" in str(info.value)  # (after `FROM base`)


def test_json_places() -> None:
    assert render('CMD ["python", "{{ v }}"]', v="/opt/task/run.py") == 'CMD ["python", "/opt/task/run.py"]'
    assert render("CMD [{{ v }}]", v='say "hi"') == 'CMD ["say \\"hi\\""]'
    assert render("CMD {{ v | tojson }}", v=["a b", "c"]) == "CMD " + shlex.quote('["a b", "c"]')
    assert render("CMD [{{ v | tojson }}]", v="a") == 'CMD ["a"]'


def test_quote_word_refuses_what_no_quote_can_hold() -> None:
    assert quote_word("https://x/simple") == "https://x/simple"
    assert quote_word("https://x/simple?a=1&b=2") == "'https://x/simple?a=1&b=2'"
    with pytest.raises(ValueError):
        quote_word("a\nb")
    assert place("x y", Place.COMMENT) == "x y"
