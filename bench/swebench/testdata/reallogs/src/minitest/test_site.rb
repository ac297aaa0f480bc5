# frozen_string_literal: true

# A jekyll-style minitest file: shoulda-context names each test
# "test_: <context> should <name>. ", which is what parse_log_minitest's
# `(.+)\. ` relies on. Run as SWE-bench runs jekyll:
#   ruby -I test test/test_site.rb -v -n "/static files/"
require_relative "helper"

class TestSite < Minitest::Test
  context "static files" do
    should "be copied" do            # passes
      assert_equal 2, 1 + 1
    end

    should "keep their mtime" do     # fails
      assert_equal 3, 1 + 1
    end

    should "survive a bad config" do # errors
      raise ArgumentError, "bad config"
    end

    should "honour excludes" do      # skipped
      skip "not yet"
    end
  end

  context "pages" do
    should "not run under the filter" do # filtered out by -n
      assert true
    end
  end
end
