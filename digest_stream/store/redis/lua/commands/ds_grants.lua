-- ds_grants: which of the commands named the caller may not run (read-only), which
-- RedisStore checks on every primary when it starts: a command refused inside a function
-- fails the call after its first writes, which Redis does not roll back (a close that had
-- deleted its digest before its meta's write was refused left the timeline without its
-- cool-down), so a missing grant is named at the start instead, before any call.
-- KEYS: none
-- ARGV: key, commands
-- Reply: refused
-- Needs: invalid_argument (guards).
--
-- key: a key of the caller's namespace (not read), each command checked with it as its key,
-- as the library runs them (SET checked without a key answers false whatever the grants);
-- commands: the library's (acl.LIBRARY_COMMANDS), one argument each.

local function grants(_, args)
    if #args < 2 then
        invalid_argument('grants expects a key, then the names of commands')
    end
    local refused, key = {}, args[1]
    for i = 2, #args do
        local known, allowed = pcall(redis.acl_check_cmd, args[i], key)
        if not known then
            invalid_argument('grants expects the names of commands, got one Redis does not know')
        elseif not allowed then
            refused[#refused + 1] = args[i]
        end
    end
    return refused
end
