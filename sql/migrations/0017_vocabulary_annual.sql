-- A seeded concept for the commonest review period of security questionnaires: "reviewed at least
-- annually", "tested in the last year", "every 12 months" (docs/answer-quality.md, "Fifth round").
-- A question asking whether something happened in the last year is answered by an entry saying
-- it happens annually, and the two share no lexeme.
--
-- Left out on purpose, because the english stemmer makes them the bare lexeme 'year' (so "data is
-- kept for seven years" would mean "annually"): 'yearly', 'each year', 'once a year'; and a bare
-- '12 months', a retention period as often as a review period.
INSERT INTO knowledge_vocabulary (concept, phrase)
SELECT 'annual', p.phrase
  FROM unnest(ARRAY['annually', 'every year', 'last year', 'past year', 'per year',
                    'every 12 months', 'last 12 months', 'past 12 months',
                    'every twelve months', 'last twelve months', 'past twelve months'])
       AS p(phrase)
-- An operator may have added one of these already (for every account).
ON CONFLICT DO NOTHING;
