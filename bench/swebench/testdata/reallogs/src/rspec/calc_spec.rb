# frozen_string_literal: true

# RSpec, run as SWE-bench runs fastlane/fpm/rubocop:
#   rspec calc_spec.rb --no-color --format json | <the repo's jq transform>
RSpec.describe "Calc" do
  it "adds" do                        # passes
    expect(1 + 1).to eq(2)
  end

  it "subtracts" do                   # fails
    expect(3 - 1).to eq(1)
  end

  it "divides" do                     # errors (raises): RSpec calls it failed
    raise ZeroDivisionError, "boom"
  end

  it "multiplies" do                  # pending (skipped)
    skip "not yet"
  end

  # The same description twice, one passing, one failing (rubocop's
  # transform groups by description).
  it "rounds" do                      # passes
    expect(1.4.round).to eq(1)
  end

  context "with negative numbers" do
    it "rounds" do                    # fails
      expect(-1.5.round).to eq(-1)
    end
  end
end
