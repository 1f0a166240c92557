-- batch_writes.lua: the batch form's writes (batches.lua holds its layout and reads): an add
-- writing its batch, the acknowledgement closing it, and maintenance rotating the index and
-- taking over the batches nobody closed.
-- Holds: nothing of its own at the top level: write_batch, close_batch, rotate_index and
--   take_over_batches, added to batches.
-- Needs: COOLING_MARGIN, INDEX_ROTATE_AFTER, OPEN_NONCE_LENGTH (Python); ready_key (keys);
--   format_float, format_integer, ttl_ms (encoding); call_chunked, extend_ttl (helpers);
--   batches (batches).

do
    local BATCH_HEAD, INDEX_SENTINEL = batches.BATCH_HEAD, batches.INDEX_SENTINEL
    local batch_key, batch_digests_key = batches.batch_key, batches.batch_digests_key
    local index_key, previous_index_key = batches.index_key, batches.previous_index_key
    local generations_key, batches_key = batches.generations_key, batches.batches_key
    local read_batch_head, dissolve = batches.read_batch_head, batches.dissolve

    -- After an add's write_back (the leading state `leading`, see lead): its batch-form
    -- digests' index entries, the batch (the call's packed timelines and records as they came,
    -- behind the head and each timeline's record position), listed open; its ordinary digests
    -- listed for the close.
    local function write_batch(call, leading, timelines_arg, records_arg)
        local tag, now = call.tag, call.now
        local ms = format_integer(ttl_ms(leading.ttl))
        if leading.formed > 0 then
            local entries = leading.entries
        -- the index made a real hash table at once: Redis keeps a small hash (up to 512
        -- fields) as a listpack, which a lookup scans from the front (about 10k instructions
        -- per name at a few hundred); a value longer than 64 bytes (field "": no timeline
        -- is named so) makes it a hash table, lookups O(1)
        entries[#entries + 1], entries[#entries + 2] = '', INDEX_SENTINEL
        call_chunked('HSET', index_key(tag), entries)
            local positions, count, parts = leading.positions, leading.timeline_count, {}
            local chunk_format = '>' .. string.rep('I4', 256)
            for first = 1, count, 256 do
                local last = math.min(first + 255, count)
                local values = {}
                for number = first, last do
                    values[number - first + 1] = positions[number] or 0
                end
                local format = last - first == 255 and chunk_format
                    or '>' .. string.rep('I4', last - first + 1)
                parts[#parts + 1] = struct.pack(format, unpack(values))
            end
            -- the arguments appended as they are: a Lua string of the whole batch would make
            -- Lua's collector work through as many bytes again
            local key = batch_key(tag, leading.nonce)
            redis.call('SET', key, struct.pack(BATCH_HEAD, 'o', now, leading.formed,
                #leading.opened, count, #timelines_arg) .. table.concat(parts), 'PX', ms)
            redis.call('APPEND', key, timelines_arg)
            redis.call('APPEND', key, records_arg)
            redis.call('ZADD', batches_key(tag), format_float(now), leading.nonce)
            local generations = generations_key(tag)
            local dead = tonumber(redis.call('HGET', generations, 'idead') or '')
            local until_time = now + leading.ttl
            if dead == nil or dead < until_time then
                redis.call('HSET', generations, 'idead', format_float(until_time))
            end
            redis.call('HSETNX', generations, 'since', format_float(now))
            local partition_ms = ttl_ms(call.partition_ttl > leading.ttl and call.partition_ttl
                or leading.ttl)
            extend_ttl(index_key(tag), partition_ms)
            extend_ttl(generations, partition_ms)
            extend_ttl(batches_key(tag), partition_ms)
        end
        if #leading.ordinary > 0 then
            local digests = batch_digests_key(tag, leading.nonce)
            call_chunked('RPUSH', digests, leading.ordinary)
            redis.call('PEXPIRE', digests, ms)
        end
    end

    -- How long a closed batch is kept: the longest cool-down among `policies` (and
    -- COOLING_MARGIN), within each one's TTL, in ms.
    local function cooling_ms(policies)
        local longest = 1
        for _, policy in ipairs(policies) do
            local keep = math.min(policy.ttl, policy.minimum_delay + COOLING_MARGIN)
            if keep > longest then
                longest = keep
            end
        end
        return format_integer(ttl_ms(longest))
    end

    -- ds_close_leading's batch: when open, it is closed at `now` (kept for the longest cool-down
    -- among `policies`): every digest still in batch form closed in this one write. `count`
    -- short of the digests its add led (some publish failed: delivery publishes those), the
    -- batch-form ones `closing(name)` does not name first become ordinary open digests, which
    -- stay open. Returns 1 when the batch was open, else 0 (closed or taken over before).
    local function close_batch(tag, nonce, count, now, policies, closing)
        if redis.call('ZREM', batches_key(tag), nonce) == 0 then
            return 0
        end
        local head = read_batch_head(tag, nonce)
        if head == nil or head.state ~= 'o' then
            return 0
        end
        if count ~= head.led then
            local closed = closing()
            dissolve(tag, head, function(name) return not closed[name] end)
        end
        local key = batch_key(tag, nonce)
        redis.call('SETRANGE', key, '0', struct.pack('>c1d', 'c', now))
        redis.call('PEXPIRE', key, cooling_ms(policies))
        return 1
    end

    -- The index's generations (maintenance): the previous one goes once no batch it names can
    -- exist (jdead passed); then the current one, INDEX_ROTATE_AFTER old, becomes the previous
    -- (UNLINK frees a large hash off Redis's main thread). So the index holds the entries of
    -- the batches alive, and of at most two generations of leftovers.
    local function rotate_index(tag, now)
        local generations = generations_key(tag)
        local since, idead, jdead = unpack(redis.call('HMGET', generations, 'since', 'idead', 'jdead'))
        since, idead, jdead = tonumber(since or ''), tonumber(idead or ''), tonumber(jdead or '')
        local previous = previous_index_key(tag)
        if jdead ~= nil and now > jdead then
            redis.call('UNLINK', previous)
            redis.call('HDEL', generations, 'jdead')
            jdead = nil
        end
        if jdead == nil and since ~= nil and now - since >= INDEX_ROTATE_AFTER then
            if redis.call('EXISTS', index_key(tag)) == 1 then
                redis.call('UNLINK', previous) -- a generation left without its jdead, if any
                redis.call('RENAME', index_key(tag), previous)
                redis.call('HSET', generations, 'jdead', format_float(idead or now))
            end
            redis.call('HDEL', generations, 'since', 'idead')
        end
    end

    -- A batch whose key expired while open (nobody closed it or took it over within its TTL):
    -- the timelines its index entries name become READY with no digest, so their open reports
    -- the records expired, as for an ordinary digest that expired. Rare: the index is scanned.
    -- Returns how many.
    local function expired_batch(tag, nonce, opened_at)
        local count = 0
        for _, key in ipairs({index_key(tag), previous_index_key(tag)}) do
            local cursor = '0'
            repeat
                local reply = redis.call('HSCAN', key, cursor, 'COUNT', '1000')
                local flat, gone = reply[2], {}
                cursor = reply[1]
                for i = 1, #flat, 2 do
                    if string.sub(flat[i + 1], 1, OPEN_NONCE_LENGTH) == nonce then
                        gone[#gone + 1] = flat[i]
                    end
                end
                for _, name in ipairs(gone) do
                    redis.call('ZADD', ready_key(tag), opened_at, name)
                end
                call_chunked('HDEL', key, gone)
                count = count + #gone
            until cursor == '0'
        end
        return count
    end

    -- Maintenance and take-over: the open batches opened before `deadline` (their close never
    -- came: the caller gone, or slower than the maintenance timeout), each one's digests made
    -- ordinary (READY since their add, which maintenance then re-announces as any other) and
    -- the batch gone; about `limit` digests per call. Returns whether more such batches remain.
    local function take_over_batches(tag, deadline, limit)
        local stale = redis.call('ZRANGEBYSCORE', batches_key(tag), '-inf',
            '(' .. format_float(deadline), 'WITHSCORES', 'LIMIT', '0', '64')
        local done = 0
        for i = 1, #stale, 2 do
            if done >= limit then
                return true
            end
            local nonce, opened_at = stale[i], stale[i + 1]
            local head = read_batch_head(tag, nonce)
            if head == nil then
                done = done + expired_batch(tag, nonce, opened_at)
            elseif head.state == 'o' then
                done = done + dissolve(tag, head)
                redis.call('DEL', batch_key(tag, nonce))
            end
            redis.call('ZREM', batches_key(tag), nonce)
        end
        return #stale == 128
    end

    batches.write_batch, batches.close_batch = write_batch, close_batch
    batches.rotate_index, batches.take_over_batches = rotate_index, take_over_batches
end
