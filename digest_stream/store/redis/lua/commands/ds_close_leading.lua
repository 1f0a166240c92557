-- ds_close_leading: closes the digests one add led (its open nonce), once the broker
-- acknowledged them: those in the batch form (batches.lua) in one write, the batch closed
-- (each of its timelines cools down from now, with no write of its own), the ordinary ones
-- (led with several records, or settled since) each as ds_close_many closes a digest.
-- KEYS: waiting, ready
-- ARGV: now, partition_ttl, nonce, count, policies, targets
-- Reply: closed, ordinary
-- Needs: CLOSE_LEADING_REPLY, MAX_OFFSET (Python); apply_moves, close_target, many_targets,
--   new_moves (digests); batches (batches); call_chunked (helpers); call_tag (keys);
--   invalid_argument, parse_integer, parse_nonce, parse_policies, parse_time, parse_ttl
--   (guards).
--
-- policies and targets: as ds_close_many's, the add's digests being closed (the caller's
-- own: ids it made, each checked only where it is read); count: how many targets. A count
-- short of the digests the add led (a publish failed: delivery publishes those) first turns
-- the batch-form digests not among the targets into ordinary open ones, which stay open.
-- The targets are read only then, or when the add has ordinary digests. Reply: 1 when the
-- batch was open and is closed now (every batch-form target closed), 0 when it was closed
-- or taken over (maintenance made its digests ordinary) before; then {timeline, closed, ...}
-- for the targets closed as ordinary digests (1/0 each, as ds_close_many's).

local function close_leading(keys, args)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local nonce = parse_nonce(args[3], 'nonce')
    if nonce == nil then
        invalid_argument('ds_close_leading needs the nonce of the add that led the digests')
    end
    local count = parse_integer(args[4], 'count', 0, MAX_OFFSET)
    local tag = call_tag(keys, 'many')
    local policies, base = parse_policies(args, 5)
    if #args ~= base then
        invalid_argument('expects the targets as one packed argument after the policies')
    end
    local targets = nil
    -- {timeline -> its target's place}, and the targets' three lists, read once when needed
    local function read_targets()
        if targets == nil then
            local _, timelines, ids, target_policies = many_targets(keys, args, 5)
            local place = {}
            for i, timeline in ipairs(timelines) do
                place[timeline] = i
            end
            targets = {place = place, timelines = timelines, ids = ids,
                policies = target_policies}
        end
        return targets
    end
    local closed_batch = batches.close_batch(tag, nonce, count, now, policies,
        function() return read_targets().place end)
    local digests = batches.batch_digests_key(tag, nonce)
    local ordinary = redis.call('LRANGE', digests, 0, -1)
    local results = {}
    if #ordinary > 0 then
        local found = read_targets()
        local moves, left = new_moves(partition_ttl), {}
        for _, name in ipairs(ordinary) do
            local i = found.place[name]
            if i == nil then
                left[#left + 1] = name -- not this close's: a later one of this add closes it
            else
                results[#results + 1] = name
                results[#results + 1] = close_target(tag, name, found.ids[i], now,
                    found.policies[i], moves)
            end
        end
        apply_moves(tag, moves)
        if #left == 0 then
            redis.call('DEL', digests)
        else
            local ms = redis.call('PTTL', digests)
            redis.call('DEL', digests)
            call_chunked('RPUSH', digests, left)
            if ms > 0 then
                redis.call('PEXPIRE', digests, ms)
            end
        end
    end
    return {[CLOSE_LEADING_REPLY.closed] = closed_batch, [CLOSE_LEADING_REPLY.ordinary] = results}
end
