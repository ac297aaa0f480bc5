# frozen_string_literal: true

# As jekyll's test/helper.rb: minitest with minitest-reporters'
# DefaultReporter (colour on) and shoulda-context. REPORTER=plain leaves
# minitest's own reporter in place (the runner's native -v format).
require "minitest/autorun"
require "shoulda-context"
unless ENV["REPORTER"] == "plain"
  require "minitest/reporters"
  Minitest::Reporters.use! [Minitest::Reporters::DefaultReporter.new(:color => true)]
end
