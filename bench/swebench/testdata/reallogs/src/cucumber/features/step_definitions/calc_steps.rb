# frozen_string_literal: true

# Regular-expression steps: Debian's cucumber 2.4 predates {int}.
Given(/^the number (\d+)$/) { |n| @n = n.to_i }
When(/^I add (\d+)$/) { |n| @n += n.to_i }
When(/^I subtract (\d+)$/) { |n| @n -= n.to_i }
Then(/^the result is (\d+)$/) { |n| raise "got #{@n}, want #{n}" unless @n == n.to_i }
