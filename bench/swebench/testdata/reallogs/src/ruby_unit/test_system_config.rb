# frozen_string_literal: true

# test-unit, as fluentd's tests; run as SWE-bench runs fluentd:
#   ruby test_system_config.rb -v -n '/rotate_age/'
require "test/unit"

class TestSystemConfig < Test::Unit::TestCase
  def test_rotate_age_passes            # passes
    assert_equal 2, 1 + 1
  end

  def test_rotate_age_fails             # fails
    assert_equal 3, 1 + 1
  end

  def test_rotate_age_errors            # errors
    raise ArgumentError, "bad age"
  end

  def test_rotate_age_omitted           # omitted
    omit "not on this platform"
  end

  def test_rotate_age_pending           # pending
    pend "later"
  end

  test "rotate_age with a described name" do # passes
    assert true
  end

  def test_other_setting                # filtered out by -n
    assert true
  end
end
