#!/usr/bin/env bash
# gen-swebench-logs.sh regenerates bench/swebench/testdata/reallogs/*.log:
# real output of the test runners SWE-bench's repositories use, each
# run on a tiny suite under testdata/reallogs/src/<runner>/ whose outcomes
# (pass, fail, error, skip) are known by construction. reallogs_test.go
# checks SWE-bench's log parsers against these logs; it needs none of the
# runners (the logs are committed).
#
# Each runner is run with the flags SWE-bench's harness uses for the repo
# family (swebench/harness/constants/<lang>.py test_cmd), so the log has
# the shape the parser reads; the output is stdout and stderr together, as
# the harness records it.
#
# Debian 12 packages (apt-get install -y --no-install-recommends):
#   phpunit                          phpunit.log              (php repos)
#   ruby ruby-minitest ruby-shoulda-context ruby-minitest-reporters
#                                    minitest*.log            (jekyll)
#   ruby-test-unit                   ruby_unit.log            (fluentd, faker)
#   ruby-rspec jq                    rspec_*.log              (fastlane, fpm, rubocop)
#   cucumber                         cucumber.log             (jekyll 8761/8771)
#   ant ant-optional junit4 default-jdk-headless
#                                    ant.log                  (lombok)
#   maven libsurefire-java libmaven-compiler-plugin-java libmaven-resources-plugin-java
#                                    maven.log                (gson, druid, javaparser)
#   libgtest-dev cmake g++           googletest.log           (fmt)
#   doctest-dev g++                  doctest.log              (nlohmann/json)
#   autoconf automake make           automake.log             (jq's make check)
#   python3-django                   django.log               (django)
#   python3-pytest                   pytest*.log              (the pytest repos)
#   python3-sympy                    sympy.log                (sympy)
# and the Go and Rust toolchains:    gotest.log, cargo.log
# npm (into a temporary directory, never the repository):
#   jest@29 vitest@1 mocha@10 qunit@2 jasmine@5 (+ jq for jest --json)
#   karma@6 karma-mocha@2 karma-mocha-reporter@2 karma-chrome-launcher@3 (+ apt chromium, xvfb xauth)
#
# Usage: scripts/gen-swebench-logs.sh [runner...]   (default: all)
# NPM_DIR=/some/dir reuses a node_modules installed there.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/bench/swebench/testdata/reallogs
src=$data/src
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run DIR LOG CMD...: run CMD in a fresh copy of DIR, its output (stdout
# and stderr) to LOG. A failing test suite exits non-zero: that is the
# point, so the status is ignored.
run() {
	local dir=$1 log=$2
	shift 2
	rm -rf "$work/$dir"
	cp -r "$src/$dir" "$work/$dir"
	(cd "$work/$dir" && "$@") >"$data/$log" 2>&1 || true
	echo "wrote $log ($(wc -l <"$data/$log") lines)"
}

gen_phpunit() {
	run phpunit phpunit.log phpunit --testdox --colors=never CalculatorTest.php
}

gen_minitest() {
	# jekyll: bundle exec ruby -I test test/test_site.rb -v -n "/static files/"
	run minitest minitest.log ruby -I . test_site.rb -v -n "/static files/"
	run minitest minitest_plain.log env REPORTER=plain ruby -I . test_site.rb -v -n "/static files/"
}

gen_ruby_unit() {
	# fluentd: bundle exec ruby test/config/test_system_config.rb -v -n '/rotate_age/'
	run ruby_unit ruby_unit.log ruby test_system_config.rb -v -n '/rotate_age/'
}

gen_rspec() {
	# The jq transforms are FASTLANE_, FPM_ and RUBOCOP_RSPEC_JQ_TRANSFORM.
	local fastlane fpm rubocop
	fastlane=$(cat <<'EOF'
sed -n '/^{/,$p' | jq -r '.examples[] | "\(.description) - \(.id) - \(.status)"'
EOF
)
	fpm=$(cat <<'EOF'
sed -n '/^{/,$p' | jq -r '.examples[] | "\(.description) - \(.status)"'
EOF
)
	rubocop=$(cat <<'EOF'
sed -n '/^{/,$p' | \
  jq -r '.examples | group_by(.description) | .[] |
    if any(select(.status == "failed")) then
      (.[0] | "\(.description) - failed")
    else
      (.[0] | "\(.description) - \(.status)")
    end'
EOF
)
	run rspec rspec_fastlane.log bash -c "rspec ./calc_spec.rb --no-color --format json | $fastlane"
	run rspec rspec_fpm.log bash -c "rspec calc_spec.rb --no-color --format json | $fpm"
	run rspec rspec_rubocop.log bash -c "rspec calc_spec.rb --no-color --format json | $rubocop"
}

gen_cucumber() {
	# jekyll 8761: bundle exec cucumber --publish-quiet --format progress
	# --no-color features/...; Debian's cucumber 2.4 has no --publish-quiet
	# (it publishes nothing anyway).
	run cucumber cucumber.log cucumber --format progress --no-color features/calc.feature
}

gen_ant() {
	# lombok: ant test.instance (see build.xml)
	run junit ant.log ant test.instance
}

gen_maven() {
	# gson: one `mvnd test -B -pl gson -Dtest=Class#method` a test, in the
	# eval script's `set -x` trace (parse_log_maven pairs each traced
	# -Dtest= with the next BUILD SUCCESS|FAILURE). mvn stands in for mvnd,
	# offline against Debian's /usr/share/maven-repo.
	local t cmds="set -x"
	for t in adds subtractsWrongly throwsError multiplies; do
		cmds+=$'\n'"mvn -o -Dmaven.repo.local=/usr/share/maven-repo test -B -Dtest=calc.CalcTest#$t"
	done
	run maven maven.log bash -c "$cmds"
}

gen_googletest() {
	# fmt: cmake -B build -S . && cmake --build build --target X && ctest --test-dir build -V -R X
	rm -rf "$work/googletest"
	cp -r "$src/googletest" "$work/googletest"
	(cd "$work/googletest" && cmake -B build -S . >/dev/null && cmake --build build --target calc-test >/dev/null)
	(cd "$work/googletest" && ctest --test-dir build -V -R calc-test) >"$data/googletest.log" 2>&1 || true
	echo "wrote googletest.log"
}

gen_doctest() {
	# nlohmann/json: ./build/tests/test-udt_cpp11 -s -r=xml
	rm -rf "$work/doctest"
	cp -r "$src/doctest" "$work/doctest"
	(cd "$work/doctest" && g++ -std=c++17 -o calc-test calc_test.cpp)
	(cd "$work/doctest" && ./calc-test -s -r=xml) >"$data/doctest.log" 2>&1 || true
	echo "wrote doctest.log"
}

gen_automake() {
	# jq: make check (automake's parallel test driver)
	rm -rf "$work/jq"
	cp -r "$src/jq" "$work/jq"
	(cd "$work/jq" && autoreconf -fi >/dev/null 2>&1 && ./configure >/dev/null)
	(cd "$work/jq" && make check) >"$data/automake.log" 2>&1 || true
	echo "wrote automake.log"
}

gen_gotest() {
	# caddy, hugo, …: go test -v <pkg> (GOFLAGS=-mod=mod: no module cache needed)
	run gotest gotest.log env GOFLAGS=-mod=mod GOTOOLCHAIN=local go test -v -count=1 ./...
}

gen_cargo() {
	# ripgrep, tokio, …: cargo test (libtest output); offline, no dependencies.
	run cargo cargo.log env RUST_BACKTRACE=0 cargo test --offline --no-fail-fast
}

gen_django() {
	# django: ./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1
	# (Debian's python3-django; django-admin test runs the same DiscoverRunner).
	run django django.log env PYTHONPATH=. /usr/bin/python3 -m django test --verbosity 2 --settings=settings --parallel 1 calc
}

gen_pytest() {
	# TEST_PYTEST (flask, requests, …) and TEST_ASTROPY_PYTEST (astropy, sklearn, sphinx)
	run pytest pytest.log /usr/bin/python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider test_calc.py
	run pytest pytest_vv.log /usr/bin/python3 -m pytest -rA -vv -o console_output_style=classic --tb=no -p no:nose -p no:cacheprovider test_calc.py
}

gen_sympy() {
	# sympy: bin/test -C --verbose <file> (Debian's python3-sympy; see run.py)
	run sympy sympy.log env PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' /usr/bin/python3 run.py test_calc.py
}

# setup_npm installs the JavaScript runners into a temporary directory
# once (never into the repository), unless NPM_DIR names one already.
setup_npm() {
	[ -n "${NPM_DIR:-}" ] && return
	NPM_DIR=$work/npm
	mkdir -p "$NPM_DIR"
	(cd "$NPM_DIR" && npm init -y >/dev/null &&
		npm install --no-audit --no-fund jest@29 vitest@1 mocha@10 qunit@2 jasmine@5 \
			karma@6 karma-mocha@2 karma-mocha-reporter@2 karma-chrome-launcher@3 >/dev/null)
}

# run_js DIR LOG CMD...: as run, with node_modules linked into the copy.
run_js() {
	local dir=$1 log=$2
	shift 2
	setup_npm
	rm -rf "$work/$dir"
	cp -r "$src/$dir" "$work/$dir"
	ln -s "$NPM_DIR/node_modules" "$work/$dir/node_modules"
	(cd "$work/$dir" && "$@") >"$data/$log" 2>&1 || true
	echo "wrote $log ($(wc -l <"$data/$log") lines)"
}

gen_jest() {
	# babel/docusaurus/immutable-js 2006: jest <file> --verbose
	run_js jest jest.log npx jest calc.test.js --verbose
	# immutable-js 2005: npx jest ... --silent --json | JEST_JSON_JQ_TRANSFORM
	local transform
	transform=$(cat <<'EOF'
jq -r '.testResults[].assertionResults[] | "[" + (.status | ascii_upcase) + "] " + ((.ancestorTitles | join(" > ")) + (if .ancestorTitles | length > 0 then " > " else "" end) + .title)'
EOF
)
	run_js jest jest_json.log bash -c "npx jest calc.test.js --silent --json | $transform"
}

gen_jest_files() {
	# react-pdf: ./node_modules/.bin/jest --no-color (per-file PASS/FAIL lines)
	run_js jest jest_files.log ./node_modules/.bin/jest --no-color
	# calypso: npm run test-client, whose script runs
	# "node ./node_modules/.bin/jest …" (npm echoes the command, which
	# parse_log_calypso splits on).
	run_js jest calypso.log npm run test-client
}

gen_vitest() {
	# vuejs/core: pnpm run test <file> --no-watch --reporter=verbose (vitest)
	run_js vitest vitest.log npx vitest run calc.spec.js --no-watch --reporter=verbose
}

gen_karma() {
	# preact: COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="…"
	# (Debian's chromium as the Chrome binary).
	run_js karma karma.log env CHROME_BIN=/usr/bin/chromium COVERAGE=false npx karma start karma.conf.js --single-run --grep="test/calc.test.js"
}

gen_karma_chartjs() {
	# Chart.js: xvfb-run --server-args="-screen 0 1280x1024x24 -ac :99" su chromeuser -c
	# "cross-env NODE_ENV=test karma start ./karma.conf.js --single-run --coverage --grep --auto-watch false"
	# (a headed Chrome under xvfb; --no-sandbox stands in for the non-root user).
	run_js karma_chartjs karma_chartjs.log env CHROME_BIN=/usr/bin/chromium NODE_ENV=test \
		xvfb-run -a --server-args="-screen 0 1280x1024x24 -ac" \
		npx karma start ./karma.conf.js --single-run --auto-watch false
}

gen_mocha() {
	# axios: npx mocha test/unit/adapters/http.js -R tap -g 'compression'
	run_js mocha mocha_tap.log npx mocha http.js -R tap -g 'compression'
}

gen_mocha_spec() {
	# p5.js: grunt test runs its suites with mocha's spec reporter (in a
	# headless browser); parse_log_p5js reads the numbered failure list.
	run_js mocha mocha_spec.log npx mocha http.js --no-colors
}

gen_qunit() {
	# three.js: npx qunit test/unit/src/math/Sphere.tests.js
	run_js qunit qunit.log npx qunit Sphere.tests.js
}

gen_jasmine() {
	# marked: ./node_modules/.bin/jasmine --no-color --config=jasmine.json
	run_js jasmine jasmine.log ./node_modules/.bin/jasmine --no-color --config=jasmine.json
}

all=(phpunit minitest ruby_unit rspec cucumber ant maven googletest doctest automake gotest cargo django pytest sympy jest jest_files vitest karma karma_chartjs mocha mocha_spec qunit jasmine)
for r in "${@:-${all[@]}}"; do
	"gen_$r"
done
