// The shape of preact's karma.conf.js: mocha framework, karma-mocha-reporter,
// a headless Chrome launcher; run as SWE-bench runs preact:
//   npx karma start karma.conf.js --single-run --grep="test/calc.test.js"
module.exports = function (config) {
	config.set({
		browsers: ['ChromeNoSandboxHeadless'],
		customLaunchers: {
			ChromeNoSandboxHeadless: {
				base: 'Chrome',
				flags: ['--no-sandbox', '--disable-setuid-sandbox', '--headless', '--disable-gpu', '--no-gpu', '--remote-debugging-port=9333']
			}
		},
		frameworks: ['mocha'],
		reporters: ['mocha'],
		mochaReporter: { showDiff: true },
		files: [{ pattern: config.grep || 'test/**/*.test.js', watched: false }],
		captureTimeout: 0
	});
};
