"""The series model: the manifest, series and patch files, their trailers, ports onto main and
the upstream test suites, read and written as data (git only to rewrite a commit's trailer)."""
