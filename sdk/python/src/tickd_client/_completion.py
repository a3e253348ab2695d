"""``tickd completion bash``: a bash completion script written from the CLI's own parser, so it offers
exactly the commands and options that exist (zsh: ``autoload bashcompinit && bashcompinit`` first)."""

from __future__ import annotations

import argparse

_SCRIPT = """# bash completion for tickd: eval "$(tickd completion bash)"
_tickd() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" w i opts=""
    local paths=" {paths} "
    case "$prev" in
{choices}
    esac
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        case "$paths" in *" ${{path:+$path/}}$w "*) path="${{path:+$path/}}$w" ;; esac
    done
    case "$path" in
{words}
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -o default -F _tickd tickd
"""


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for name, sub in _subparsers(parser).items():
        found += _walk(sub, f"{path}/{name}" if path else name)
    return found


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


def bash(parser: argparse.ArgumentParser) -> str:
    tree = _walk(parser)
    words = [f'        "{path}") opts="{" ".join([*_subparsers(p), *_options(p)])}" ;;' for path, p in tree]
    choices: dict[str, list[str]] = {}
    for _, p in tree:
        for action in p._actions:
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                for option in action.option_strings:
                    choices[option] = [str(c) for c in action.choices]
    cases = [
        f'        {option}) COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur")); return ;;'
        for option, values in sorted(choices.items())
    ]
    paths = " ".join(path for path, _ in tree if path)
    return _SCRIPT.format(paths=paths, choices="\n".join(cases), words="\n".join(words))
