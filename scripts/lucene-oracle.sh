#!/usr/bin/env bash
# Builds the Lucene oracle of tests/lucene (real Lucene 10.5 answering analyzer, BM25 and kNN questions):
#   1. Lucene: the pyserini 2.4.0 sdist from PyPI (Apache-2.0) carries Anserini's fat jar, which holds Lucene 10.5.0
#      with analysis-common, kuromoji and nori. The sdist is downloaded once, checked against its pinned sha256, and
#      only the jar is extracted, checked against its own pinned sha256, then renamed into the cache (a killed run
#      never leaves a half jar under the final name).
#   2. tests/lucene/java/*.java compiled against the jar with a Java 21+ javac ($JAVA_HOME, then
#      /usr/lib/jvm/*/bin/javac newest first, then PATH). The classes are cached under a key hashing the sources, the
#      jar's pin and javac's major version; a second run with nothing changed only checks and prints.
#
# Cache: ${ES_RAG_LUCENE_CACHE:-$HOME/.cache/es_rag/lucene}. Options:
#   --no-download  never reach the network: exit 3 when the jar is not cached (tests use this)
# On success the last two stdout lines are "java=<java binary>" and "classpath=<classes>:<jar>" (tests read them);
# exit 3: no jar (and --no-download), exit 4: no Java 21+ javac found.
set -euo pipefail

SDIST_URL="https://files.pythonhosted.org/packages/2c/df/9ec1b77d323c8fe65fe9cbb4fb6fd0e03164cf4fdf26678f5c027db0013b/pyserini-2.4.0.tar.gz"
SDIST_SHA256="45979fa5fc8d54a35dce15cfd59d4d3dc4b4b29d8f0442e1e1f3a9ab0a303541"
JAR_MEMBER="pyserini-2.4.0/pyserini/resources/jars/anserini-2.3.0-fatjar.jar"
JAR_SHA256="375848a9bb0a7514d2a8fe13df20086961570991bf20343abf0e5312af977def"
MIN_JAVA=21

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$ROOT/tests/lucene/java"
CACHE="${ES_RAG_LUCENE_CACHE:-$HOME/.cache/es_rag/lucene}"
JAR="$CACHE/anserini-2.3.0-fatjar.jar"
download=1
[ "${1:-}" = "--no-download" ] && download=0

say() { echo "lucene-oracle: $*" >&2; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch_jar() {
  mkdir -p "$CACHE"
  local sdist="$CACHE/pyserini-2.4.0.tar.gz"
  if [ ! -f "$sdist" ] || [ "$(sha256_of "$sdist")" != "$SDIST_SHA256" ]; then
    [ "$download" = 1 ] || { say "no Lucene jar in $CACHE (run: make lucene-deps)"; exit 3; }
    say "downloading the pyserini 2.4.0 sdist (113 MB, once) from PyPI"
    local part="$sdist.part.$$"
    trap 'rm -f "$part"' EXIT
    curl -fsSL --retry 3 -o "$part" "$SDIST_URL"
    local got
    got="$(sha256_of "$part")"
    [ "$got" = "$SDIST_SHA256" ] || { say "sdist sha256 $got, expected $SDIST_SHA256"; exit 1; }
    mv -f "$part" "$sdist"
    trap - EXIT
  fi
  local part="$JAR.part.$$"
  trap 'rm -f "$part"' EXIT
  tar -xzOf "$sdist" "$JAR_MEMBER" >"$part"
  local got
  got="$(sha256_of "$part")"
  [ "$got" = "$JAR_SHA256" ] || { say "jar sha256 $got, expected $JAR_SHA256"; exit 1; }
  mv -f "$part" "$JAR"
  trap - EXIT
  rm -f "$sdist"  # the jar is all the oracle needs; the sdist would be 113 MB more in the cache
  say "Lucene jar cached: $JAR"
}

javac_major() {  # "javac 25.0.3" -> 25 ("javac 1.8.0_392" -> 1)
  "$1" -version 2>&1 | sed -n 's/^javac \([0-9]*\).*/\1/p' | head -1
}

find_javac() {
  local candidates=()
  [ -n "${JAVA_HOME:-}" ] && candidates+=("$JAVA_HOME/bin/javac")
  local jvm=()
  for c in /usr/lib/jvm/*/bin/javac; do
    [ -x "$c" ] && jvm+=("$(javac_major "$c") $c")
  done
  if [ "${#jvm[@]}" -gt 0 ]; then
    while read -r _ c; do candidates+=("$c"); done < <(printf '%s\n' "${jvm[@]}" | sort -k1,1nr)
  fi
  command -v javac >/dev/null 2>&1 && candidates+=("$(command -v javac)")
  for c in "${candidates[@]}"; do
    [ -x "$c" ] || continue
    local major
    major="$(javac_major "$c")"
    if [ -n "$major" ] && [ "$major" -ge "$MIN_JAVA" ] && [ -x "$(dirname "$c")/java" ]; then
      echo "$c"
      return 0
    fi
  done
  say "no Java $MIN_JAVA+ javac (tried: ${candidates[*]:-none}); set JAVA_HOME to a JDK $MIN_JAVA+"
  exit 4
}

[ -f "$JAR" ] || fetch_jar
JAVAC="$(find_javac)"
JAVA="$(dirname "$JAVAC")/java"
KEY="$( (cat "$SRC"/*.java; echo "$JAR_SHA256 $(javac_major "$JAVAC")") | sha256sum | cut -c1-16)"
CLASSES="$CACHE/classes-$KEY"
if [ ! -d "$CLASSES" ]; then
  tmp="$(mktemp -d "$CACHE/classes-tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  "$JAVAC" -nowarn -encoding UTF-8 -cp "$JAR" -d "$tmp" "$SRC"/*.java
  # another run may have compiled the same key meanwhile: keep the first, drop ours
  mv -T "$tmp" "$CLASSES" 2>/dev/null || rm -rf "$tmp"
  trap - EXIT
  for old in "$CACHE"/classes-*; do  # the classes of earlier sources
    case "$old" in "$CLASSES" | "$CACHE"/classes-tmp.*) ;; *) rm -rf "$old" ;; esac
  done
  say "compiled $(ls "$SRC"/*.java | wc -l) Java source(s) with $JAVAC into $CLASSES"
fi
echo "java=$JAVA"
echo "classpath=$CLASSES:$JAR"
