# Usage, rates and statements arrive with the billing issue.
