#!/usr/bin/env bash
# Installs the coding-agent CLIs the tests drive (the real npm packages, pinned) into .clis/ beside the
# project: .clis/node_modules/.bin/claude and .clis/node_modules/.bin/codex. Without npm nothing is
# installed and the tests of the CLI researcher say so and skip.
# Usage: coding_clis.sh [PREFIX]
set -u
prefix="${1:-.clis}"
packages=("@anthropic-ai/claude-code@2.1.328" "@openai/codex@0.169.0")
stamp="$prefix/.installed-$(echo "${packages[*]}" | tr ' /@' '_+=')"
[ -e "$stamp" ] && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "note: npm is missing; the tests of the CLI researcher will be skipped"
  exit 0
fi
mkdir -p "$prefix"
if npm install --silent --no-audit --no-fund --prefix "$prefix" "${packages[@]}" >/dev/null 2>&1; then
  touch "$stamp"
else
  echo "note: could not install ${packages[*]}; the tests of the CLI researcher will be skipped"
fi
exit 0
