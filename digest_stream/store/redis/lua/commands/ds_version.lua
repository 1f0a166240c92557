-- ds_version: the library's version (read-only), which RedisStore checks on every primary.
-- KEYS: none
-- ARGV: none
-- Reply: version
-- Needs: LIBRARY_VERSION (Python).

local function version(_, _)
    return LIBRARY_VERSION
end
