-- Seeded phrases for sites far apart, the usual wording of questionnaires about data centres and
-- backups: a question whether data centres are "geographically diverse" is answered by an entry
-- about "geographically-separate" backup locations or "geo-redundant" regions, and the adjectives
-- share no lexeme (docs/answer-quality.md, "Sixth round"). They join the concept that already
-- holds 'geo-redundant', 'geographic redundancy' and 'multi-region'.
--
-- Every phrase names the geography: a bare 'diverse' or 'separate' says nothing about sites.
-- ("Geographic diversity" and "geographic separation" are the same lexemes as two of these, so
-- they match too.) Left out: 'geographically distributed', whose lexemes are also "geographic
-- distribution" (of staff, customers, subprocessors), and 'geographically redundant', the same
-- lexemes as the 'geographic redundancy' the concept already has.
INSERT INTO knowledge_vocabulary (concept, phrase)
SELECT 'high_availability', p.phrase
  FROM unnest(ARRAY['geographically diverse', 'geographically separate',
                    'geographically dispersed', 'geographically distinct'])
       AS p(phrase)
-- An operator may have added one of these already (for every account).
ON CONFLICT DO NOTHING;
