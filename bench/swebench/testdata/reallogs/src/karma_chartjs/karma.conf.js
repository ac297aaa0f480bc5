// The shape of Chart.js's karma.conf.js: jasmine-style describe/it (here
// mocha), karma's default progress reporter, a headed Chrome under xvfb.
// Run as SWE-bench runs Chart.js:
//   xvfb-run … karma start ./karma.conf.js --single-run --coverage --grep --auto-watch false
module.exports = function (config) {
	config.set({
		browsers: ['chrome'],
		customLaunchers: {
			chrome: { base: 'Chrome', flags: ['--no-sandbox', '--disable-background-timer-throttling', '--disable-renderer-backgrounding'] }
		},
		frameworks: ['mocha'],
		reporters: ['progress'],
		files: ['test/**/*.test.js'],
		captureTimeout: 0
	});
};
