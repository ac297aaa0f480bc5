package swebench

import (
	"strings"
)

// Java, Kotlin and PHP log parsers: swebench/harness/log_parsers/java.py,
// kotlin.py and php.py, ported line for line.

var (
	mavenTestName = pyre(`^.*-Dtest=(\S+).*$`)
	mavenResult   = pyre(`^.*BUILD (SUCCESS|FAILURE)$`)
)

// parseMaven is parse_log_maven. Maven prints no per-test result, so the
// harness runs each test alone under set -x: the "-Dtest=NAME" command
// line names the test, the next "BUILD SUCCESS|FAILURE" is its result.
// Names queue up, so several commands traced before their results pair
// with them in order.
func parseMaven(log string) (map[string]string, error) {
	sm := map[string]string{}
	var pending []string
	for _, line := range strings.Split(log, "\n") {
		line = pyStrip(line)
		if m := pyMatch(mavenTestName, line); m != nil {
			pending = append(pending, m[1])
		}
		if m := pyMatch(mavenResult, line); m != nil && len(pending) > 0 {
			name := pending[0]
			pending = pending[1:]
			switch m[1] {
			case "SUCCESS":
				sm[name] = StatusPassed
			case "FAILURE":
				sm[name] = StatusFailed
			}
		}
	}
	return sm, nil
}

var antTest = pyre(`^\s*\[junit\]\s+\[(PASS|FAIL|ERR)\]\s+(.*)$`)

// parseAnt is parse_log_ant: "[junit] [PASS|FAIL|ERR] name"; ERR counts as
// FAILED.
func parseAnt(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(antTest, pyStrip(line))
		if m == nil {
			continue
		}
		switch m[1] {
		case "PASS":
			sm[m[2]] = StatusPassed
		case "FAIL", "ERR":
			sm[m[2]] = StatusFailed
		}
	}
	return sm, nil
}

var (
	gradleFull       = pyre(`^([^>].+)\s+(PASSED|FAILED)$`)
	gradleTestName   = pyre(`^(\S+\s+>\s+\S+)$`)
	gradleStatusOnly = pyre(`^(PASSED|FAILED)$`)
)

// parseGradleCustom is parse_log_gradle_custom: "Class > method PASSED"
// lines, or the name and the status on separate lines when other output
// came between them.
func parseGradleCustom(log string) (map[string]string, error) {
	sm := map[string]string{}
	pending := ""
	havePending := false
	set := func(name, status string) {
		switch status {
		case "PASSED":
			sm[name] = StatusPassed
		case "FAILED":
			sm[name] = StatusFailed
		}
	}
	for _, line := range strings.Split(log, "\n") {
		s := pyStrip(line)
		if m := pyMatch(gradleFull, s); m != nil {
			set(m[1], m[2])
			havePending = false
			continue
		}
		if m := pyMatch(gradleTestName, s); m != nil {
			pending, havePending = m[1], true
			continue
		}
		// Python tests the pending name for truth: an empty one (which
		// the name pattern cannot produce) would not count.
		if havePending && pending != "" {
			if m := pyMatch(gradleStatusOnly, s); m != nil {
				set(pending, m[1])
				havePending = false
			}
		}
	}
	return sm, nil
}

const junitXMLStart = `<?xml version="1.0" encoding="UTF-8"?>`

var (
	gradlePassedRes  = pyres(`^> Task :(\S+)$`, `^> Task :(\S+) UP-TO-DATE$`, `^(.+ > .+) PASSED$`)
	gradleFailedRes  = pyres(`^> Task :(\S+) FAILED$`, `^(.+ > .+) FAILED$`)
	gradleSkippedRes = pyres(`^> Task :(\S+) SKIPPED$`, `^> Task :(\S+) NO-SOURCE$`, `^(.+ > .+) SKIPPED$`)
)

// parseGradle is kotlin.py's parse_log_gradle: the JUnit XML report when
// the log holds one that parses, else Gradle's text output; either way a
// "static_verification" entry says whether the log has STATIC
// VERIFICATION SUCCESS. A test in several sets ends as the last of
// PASSED, FAILED, SKIPPED that holds it, as the Python's order of writes.
func parseGradle(log string) (map[string]string, error) {
	passed, failed, skipped := map[string]bool{}, map[string]bool{}, map[string]bool{}
	finish := func() map[string]string {
		sm := map[string]string{}
		for t := range passed {
			sm[t] = StatusPassed
		}
		for t := range failed {
			sm[t] = StatusFailed
		}
		for t := range skipped {
			sm[t] = StatusSkipped
		}
		if strings.Contains(log, "STATIC VERIFICATION SUCCESS") {
			sm["static_verification"] = StatusPassed
		} else {
			sm["static_verification"] = StatusFailed
		}
		return sm
	}

	// xml_end is find()+len, so a missing </testsuites> gives a slice
	// that cannot parse and the text fallback runs.
	start := strings.Index(log, junitXMLStart)
	end := strings.Index(log, "</testsuites>") + len("</testsuites>")
	if start != -1 {
		if root, err := etreeFromString(pySlice(log, start, end)); err == nil {
			for _, suite := range root.descendants("testsuite") {
				for _, tc := range suite.findChildren("testcase") {
					id := tc.get("classname", "") + "." + tc.get("name", "")
					switch {
					case tc.find("failure") != nil || tc.find("error") != nil:
						failed[id] = true
					case tc.find("skipped") != nil:
						skipped[id] = true
					default:
						passed[id] = true
					}
				}
			}
			return finish(), nil
		}
	}

	for _, line := range pySplitLines(log) {
		for _, re := range gradlePassedRes {
			if m := pyMatch(re, line); m != nil && !failed[m[1]] {
				passed[m[1]] = true
			}
		}
		for _, re := range gradleFailedRes {
			if m := pyMatch(re, line); m != nil {
				failed[m[1]] = true
				delete(passed, m[1])
			}
		}
		for _, re := range gradleSkippedRes {
			if m := pyMatch(re, line); m != nil {
				skipped[m[1]] = true
			}
		}
	}
	return finish(), nil
}

var (
	phpunitSuite = pyre(`^(\w.+) \(.+\)$`)
	phpunitTest  = pyre(`^\s*([✔✘↩])\s*(.*)$`)
)

// parsePHPUnit is parse_log_phpunit (phpunit --testdox): a "Suite
// (Class\Name)" line opens a suite; "✔|✘|↩ name" lines are its tests,
// named "Suite > name" ("None > name" before any suite, as Python
// formats a missing suite).
func parsePHPUnit(log string) (map[string]string, error) {
	sm := map[string]string{}
	suite := "None"
	for _, line := range strings.Split(log, "\n") {
		if m := pyMatch(phpunitSuite, line); m != nil {
			suite = m[1]
			continue
		}
		m := pyMatch(phpunitTest, line)
		if m == nil {
			continue
		}
		name := suite + " > " + m[2]
		switch m[1] {
		case "✔":
			sm[name] = StatusPassed
		case "✘":
			sm[name] = StatusFailed
		case "↩":
			sm[name] = StatusSkipped
		}
	}
	return sm, nil
}

// kotlinRepos are MAP_REPO_TO_PARSER_KOTLIN's repos (all parse_log_gradle).
var kotlinRepos = []string{
	"Aliucord/Aliucord", "AllanWang/Frost-for-Facebook", "AppIntro/AppIntro",
	"DroidKaigi/conference-app-2021", "DroidKaigi/conference-app-2023",
	"GetStream/whatsApp-clone-compose", "GrapheneOS/Camera", "IacobIonut01/Gallery",
	"LemmyNet/jerboa", "LibChecker/LibChecker", "MMRLApp/MMRL", "Mahmud0808/ColorBlendr",
	"NordicSemiconductor/Android-DFU-Library", "Pool-Of-Tears/GreenStash", "Pool-Of-Tears/Myne",
	"Shabinder/SpotiFlyer", "Stypox/dicio-android", "T8RIN/ImageToolbox", "Tapadoo/Alerter",
	"TrianguloY/URLCheck", "android/nowinandroid", "android/socialite", "android/sunflower",
	"android/uamp", "aniyomiorg/aniyomi", "avluis/Hentoid", "beemdevelopment/Aegis",
	"d4rken-org/capod", "flipperdevices/Flipper-Android-App", "getodk/collect", "gradle/gradle",
	"iSoron/uhabits", "jaredsburrows/android-gradle-java-app-template",
	"jarnedemeulemeester/findroid", "kasem-sm/SlimeKT", "keymapperorg/KeyMapper",
	"kylecorry31/Trail-Sense", "leonlatsch/Photok", "nextcloud/android", "nextcloud/notes-android",
	"owncloud/android", "oxygen-updater/oxygen-updater", "patzly/grocy-android",
	"recloudstream/cloudstream", "spacecowboy/Feeder", "thunderbird/thunderbird-android",
	"wikimedia/apps-android-wikipedia", "you-apps/ClockYou", "you-apps/RecordYou",
}
